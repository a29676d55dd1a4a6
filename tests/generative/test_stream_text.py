"""Streaming text from token ids: a character that a byte-level BPE splits over several tokens comes out whole,
once its last token is there, never as U+FFFD pieces."""

import pytest

from litert_torch.generative.runner import stream_text

tokenizers = pytest.importorskip("tokenizers")

TEXT = " café 日本 naïve"


def byte_level_bpe():
    """A byte-level BPE trained on ASCII text only: every non-ASCII character is one token per UTF-8 byte."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=300, initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
                                  show_progress=False)
    tok.train_from_iterator(["the cafe is open", "a naive model", "one token at a time"] * 4, trainer)
    return tok


def test_split_characters_come_out_whole():
    tok = byte_level_bpe()
    ids = tok.encode(TEXT).ids
    # the premise: decoding token by token cuts characters ('é' is two tokens, '日' three)
    assert len(ids) > len(TEXT.split()) and any("\ufffd" in tok.decode(ids[:n]) for n in range(1, len(ids)))
    given: list[str] = []

    def tokens():
        for n, token in enumerate(ids, 1):
            yield token
            # asked for the next token: every character complete in the first n has been given, and no more
            assert "".join(given) == tok.decode(ids[:n]).rstrip("\ufffd")

    for piece in stream_text(tokens(), tok.decode):
        given.append(piece)
    assert "".join(given) == TEXT
    assert not any("\ufffd" in piece for piece in given), given


def test_bytes_that_never_complete_a_character_come_out_at_the_end():
    tok = byte_level_bpe()
    ids = tok.encode(" 日").ids[:-1]  # the first two of the character's three bytes
    pieces = list(stream_text(iter(ids), tok.decode))
    assert "".join(pieces) == tok.decode(ids) and pieces[-1].endswith("\ufffd")
    assert list(stream_text(iter([]), tok.decode)) == []
