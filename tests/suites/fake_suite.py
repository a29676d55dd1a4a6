"""A suite whose cases misbehave on purpose, for the runner's tests."""

import os
import time


def cases():
    return ["ok", "abort", "hang", "raise", "ok_after"]


def op_of(case):
    return case


def run_case(case):
    if case == "abort":
        os.abort()
    if case == "hang":
        time.sleep(600)
    if case == "raise":
        raise RuntimeError("boom")
    print("noise on stdout")  # must not be taken for an answer
    return {"status": "pass", "detail": ""}
