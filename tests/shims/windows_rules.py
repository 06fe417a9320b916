"""Windows' rules for the suite's own process, on Linux (SIMULATE_WINDOWS=1; conftest imports
this): subprocess refuses ``preexec_fn`` and takes ``creationflags`` (here it drops them, as
POSIX refuses them); a symbolic link needs developer mode (WinError 1314); chmod keeps only the
read-only flag, so a file reads 0o666 or 0o444 (CPython's os.chmod on Windows), and a rename onto
a read-only file is "Access is denied" (MoveFileExW with MOVEFILE_REPLACE_EXISTING, which
CPython's os.replace calls, fails so: ERROR_ACCESS_DENIED, WinError 5); opening a folder
as a file is "Permission denied" (CPython's open(): Windows' CreateFileW, errno EACCES); text
read or written without an encoding is in the ANSI code page, cp1252 on an English Windows
(open(), and io.text_encoding, which pathlib's read_text and write_text ask). platform.system()
answers "Windows" once torch has loaded (conftest.windows_answers); the scripts the tests start
answer so too, with a torch without libuv (conftest.clean_env)."""

import builtins
import io
import os
import stat
import subprocess

_popen_init = subprocess.Popen.__init__


def _popen_as_on_windows(self, *args, preexec_fn=None, creationflags=0, **kwargs):
    if preexec_fn is not None:
        raise ValueError("preexec_fn is not supported on Windows platforms")
    _popen_init(self, *args, **kwargs)


def _symlink_without_developer_mode(*args, **kwargs):
    raise OSError(1314, "A required privilege is not held by the client")


_chmod, _open, _replace = os.chmod, builtins.open, os.replace


def _chmod_as_on_windows(path, mode, *args, **kwargs):
    _chmod(path, 0o666 if mode & stat.S_IWRITE else 0o444, *args, **kwargs)


def _replace_as_on_windows(source, target, *args, **kwargs):
    if os.path.isfile(target) and not os.stat(target).st_mode & stat.S_IWRITE:
        raise PermissionError(13, "Access is denied", str(source), 5, str(target))
    _replace(source, target, *args, **kwargs)


def _open_as_on_windows(file, mode="r", buffering=-1, encoding=None, *args, **kwargs):
    if isinstance(file, (str, bytes, os.PathLike)) and os.path.isdir(file):
        raise PermissionError(13, "Permission denied", file)
    if "b" not in mode and encoding is None:
        encoding = ANSI_CODE_PAGE
    return _open(file, mode, buffering, encoding, *args, **kwargs)


ANSI_CODE_PAGE = "cp1252"


def _text_encoding_as_on_windows(encoding, stacklevel=2):
    return ANSI_CODE_PAGE if encoding is None else encoding


subprocess.Popen.__init__ = _popen_as_on_windows
os.symlink = _symlink_without_developer_mode
os.chmod = _chmod_as_on_windows
os.replace = _replace_as_on_windows
builtins.open = _open_as_on_windows
io.text_encoding = _text_encoding_as_on_windows
