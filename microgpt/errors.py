"""The errors a user can fix, raised with one line that says what is wrong and what to do
(``microgpt.cli`` prints it and exits with status 2)."""
import os
import stat


class UserError(Exception):
    """Bad input; the message is one line for the user."""


class BackendError(RuntimeError):
    """The requested backend cannot run here (e.g. cuda without a GPU)."""


def file_kind(path):
    """What a path that exists is, for messages: "a file", "a directory", "a FIFO" ..."""
    mode = os.stat(path).st_mode
    for test, kind in ((stat.S_ISREG, "a file"), (stat.S_ISDIR, "a directory"),
                       (stat.S_ISFIFO, "a FIFO"), (stat.S_ISCHR, "a character device"),
                       (stat.S_ISBLK, "a block device"), (stat.S_ISSOCK, "a socket")):
        if test(mode):
            return kind
    return "not a regular file"
