"""The old import path of ``engines.window``, kept for the code and checks that import it here.

The window arithmetic sits below ``engines.providers``, which needs it, so the providers no
longer import the transcript-keeping engine that imports them.
"""

from engines.window import *  # noqa: F403
