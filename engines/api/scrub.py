"""The old import path of ``engines.scrub``, kept for the code and checks that import it here.

The secret scrubber sits below ``engines.providers``, which needs it, so the providers no
longer import the transcript-keeping engine that imports them.
"""

from engines.scrub import *  # noqa: F403
