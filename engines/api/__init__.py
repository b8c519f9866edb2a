"""Old import paths kept for the checks that use them (DESIGN §3): ``engines.api.context``
(the window arithmetic, now ``engines.window``) and ``engines.api.too_long`` (now
``engines.providers.too_long``). The transcript-keeping engine itself lives in
``engines.context``; the secret scrubber in ``engines.scrub``."""
