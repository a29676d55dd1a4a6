"""A process's peak resident size, measured from a reset (standard library only: both this project's benchmark
processes and the official converter's workers, in its own environment, import it)."""


def reset_peak_rss() -> None:
    """Start the peak over from the present resident size. A child's ru_maxrss starts from its parent's resident
    size at fork (or at vfork, then exec), so a fresh process resets it before measuring."""
    with open("/proc/self/clear_refs", "w") as f:
        f.write("5")


def peak_rss() -> int:
    """VmHWM in bytes: the process's peak resident size since the last reset."""
    with open("/proc/self/status") as f:
        return next(int(line.split()[1]) for line in f if line.startswith("VmHWM")) * 1024
