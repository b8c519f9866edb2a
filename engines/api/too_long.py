"""The old import path of ``engines.providers.too_long``, kept for the code and checks that
import it here.

Reading a too-long refusal is the providers' work (their errors are mapped with it), so it lives
with them and the providers no longer import the transcript-keeping engine that imports them.
"""

from engines.providers.too_long import *  # noqa: F403
