"""Old import paths kept for code and checks that use them: ``engines.api.context`` (the
window arithmetic, now ``engines.window``), ``engines.api.too_long`` (now
``engines.providers.too_long``) and ``engines.api.scrub`` (now ``engines.scrub``). The
transcript-keeping engine itself lives in ``engines.context``."""
