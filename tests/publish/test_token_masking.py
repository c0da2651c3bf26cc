"""Token masking in messages: a short token does not mangle the words that contain it."""
from __future__ import annotations




# 10. a short token masks only whole words
def test_redact_short_token_does_not_mangle_words():
    from perfgate.publish.github import redact
    assert redact("exception: x failed", "x") == "exception: *** failed"
    long = "ghp_0123456789abcdef"
    assert redact(f"url?t={long}x and {long}", long) == "url?t=***x and ***"
    assert redact("Authorization: token abc", "zz") == "Authorization: token ***"
