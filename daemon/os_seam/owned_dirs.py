"""Directories and files the root supervisor makes for a job that runs as its owner (issue 32), handed to that user
without following a symlink the user could have planted.

The threat: a job's log_root, its workdir and its caches are the owner's, so the owner may put a symlink anywhere
under them (or in their home, where a log_root usually lies). A root `mkdir -p` and `chown` of such a path would
follow it and hand `/etc` to the user. So every path is walked from `/` one component at a time with directory
file descriptors (`openat(O_NOFOLLOW | O_DIRECTORY)`, the shape of systemd's `chase()` in src/basic/chase.c): a
directory once opened cannot be swapped under the walk, and a symlink is followed only where no one but root can
change it (in a root-owned directory no one else may write to, or a root-owned link in a sticky one such as /tmp).
Any other symlink on the way is refused, naming it. The last component is created and chowned through its own
descriptor (`fchown`), or, for a file, `lchown`ed in its parent's descriptor.

What is handed over: what this walk created, what is root's (left by an earlier run as root; it gets the mode too),
or what is the user's already (left as it is); a directory of a third user is refused (a job must not take someone
else's directory).

Stdlib only, like the rest of the seam. The callers decide which paths; this module only makes and hands them.
"""

from __future__ import annotations

import errno
import os
import stat
from pathlib import Path

MAX_LINKS = 40  # as the kernel's MAXSYMLINKS: a loop ends with a refusal, not a hang
_DIR = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC


class OwnershipRefused(Exception):
    """The path cannot be given to the job's user safely; the message names the path and why."""


def _trusted_link(dir_fd: int, link: os.stat_result) -> bool:
    """A symlink only root can replace: in a root-owned directory without group/other write, or a root-owned link
    in a sticky directory (only the link's owner may remove it there)."""
    d = os.fstat(dir_fd)
    if d.st_uid != 0:
        return False
    return d.st_mode & 0o022 == 0 or bool(d.st_mode & stat.S_ISVTX and link.st_uid == 0)


def _walk(path: Path, *, create: bool, uid: int, gid: int, who: str, mode: int) -> tuple[int, bool]:
    """Open `path` as a directory, component by component from `/`; (its fd, whether this walk created it).
    Missing directories are made when `create` (a new one is the user's when its parent is theirs; the last
    component is handed over by the caller). Raises OwnershipRefused, or FileNotFoundError when not `create`."""
    comps = list(Path(os.path.abspath(path)).parts[1:])
    fd = os.open("/", _DIR)
    created = False
    links = 0
    try:
        while comps:
            name = comps.pop(0)
            created = False
            try:
                nfd = os.open(name, _DIR, dir_fd=fd)
            except FileNotFoundError:
                if not create:
                    raise
                try:
                    os.mkdir(name, mode if not comps else 0o755, dir_fd=fd)
                    created = True
                except FileExistsError:
                    pass  # made meanwhile: opened (and checked) as any other
                nfd = os.open(name, _DIR, dir_fd=fd)  # ELOOP if someone swapped a symlink in: refused below
                if created and comps and os.fstat(fd).st_uid == uid:
                    os.fchown(nfd, uid, gid)  # a parent made inside the user's own directory is theirs too
            except OSError as exc:
                if exc.errno not in (errno.ELOOP, errno.ENOTDIR):
                    raise
                st = os.lstat(name, dir_fd=fd)
                shown = f"{path}: {name}"
                if not stat.S_ISLNK(st.st_mode):
                    raise OwnershipRefused(f"{shown} is not a directory") from None
                if not _trusted_link(fd, st):
                    raise OwnershipRefused(
                        f"{shown} is a symlink in a directory that someone other than root can change; isaacd "
                        f"does not follow it for a job that runs as {who}: name the real directory") from None
                links += 1
                if links > MAX_LINKS:
                    raise OwnershipRefused(f"{path}: too many levels of symbolic links") from None
                target = os.readlink(name, dir_fd=fd)
                rest = list(Path(target).parts)
                if target.startswith("/"):
                    os.close(fd)
                    fd = os.open("/", _DIR)
                    rest = rest[1:]
                comps = rest + comps
                continue
            os.close(fd)
            fd = nfd
        return fd, created
    except BaseException:
        os.close(fd)
        raise


def _hand(fd: int, st: os.stat_result, path: Path, uid: int, gid: int, who: str, created: bool) -> bool:
    """Give the open directory to uid:gid; whether it changed hands (False: it was theirs already)."""
    if st.st_uid == uid:
        return False
    if not created and st.st_uid != 0:
        raise OwnershipRefused(f"{path} belongs to uid {st.st_uid}, not to {who} (uid {uid}), who runs the job; "
                               "give the job a directory of its own")
    os.fchown(fd, uid, gid)
    return True


def make_owned_dir(path: Path, uid: int, gid: int, who: str, mode: int = 0o750) -> None:
    """`mkdir -p path` and hand it to uid:gid (mode `mode` when created here), never through a symlink the user could
    have planted. Raises OwnershipRefused (a symlink on the way, a third user's directory) or OSError."""
    os.close(open_owned_dir(path, uid, gid, who, mode))


def open_owned_dir(path: Path, uid: int, gid: int, who: str, mode: int = 0o750) -> int:
    """make_owned_dir, and the directory's descriptor (the caller closes it): what root then writes there goes through
    it (`openat`, `renameat`), so a link the user puts in the directory's place later changes nothing."""
    fd, created = _walk(path, create=True, uid=uid, gid=gid, who=who, mode=mode)
    try:
        if _hand(fd, os.fstat(fd), path, uid, gid, who, created) or created:
            os.fchmod(fd, mode)  # mkdir's mode went through the umask; a root dir handed over gets it too
    except BaseException:
        os.close(fd)
        raise
    return fd


def hand_over(path: Path, uid: int, gid: int, who: str) -> bool:
    """Give an existing directory or file (a FIFO, an events file) to uid:gid: only when it is root's or theirs, and
    never through a symlink. False when it does not exist. Raises OwnershipRefused."""
    try:
        fd, _ = _walk(path.parent, create=False, uid=uid, gid=gid, who=who, mode=0o755)
    except FileNotFoundError:
        return False
    try:
        try:
            st = os.lstat(path.name, dir_fd=fd)
        except FileNotFoundError:
            return False
        if stat.S_ISLNK(st.st_mode):
            raise OwnershipRefused(f"{path} is a symlink; isaacd does not hand it to {who}")
        if st.st_uid == uid:
            return True
        if st.st_uid != 0:
            raise OwnershipRefused(f"{path} belongs to uid {st.st_uid}, not to {who} (uid {uid})")
        # lchown in the parent's fd: a name swapped meanwhile (only in a directory the user may write) is a link or
        # a file of the user's own, and the link is what gets chowned, never its target
        os.chown(path.name, uid, gid, dir_fd=fd, follow_symlinks=False)
        return True
    finally:
        os.close(fd)


def create_owned_file(path: Path, uid: int, gid: int, who: str, mode: int = 0o640) -> None:
    """An empty file for the user to write (O_EXCL | O_NOFOLLOW, then fchown), or the existing one handed over."""
    fd, _ = _walk(path.parent, create=True, uid=uid, gid=gid, who=who, mode=0o755)
    try:
        try:
            ffd = os.open(path.name, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, mode,
                          dir_fd=fd)
        except FileExistsError:
            pass
        else:
            try:
                os.fchown(ffd, uid, gid)
                os.fchmod(ffd, mode)
            finally:
                os.close(ffd)
            return
    finally:
        os.close(fd)
    hand_over(path, uid, gid, who)


def open_state_dir(state_dir: Path, reached: tuple[str, ...], private: tuple[str, ...]) -> None:
    """Let an owner's trainer reach its own files under the state dir (owner_dirs.open_state_dir decides which
    folders): the `reached` folders made, the state dir (0700 as StateStore makes it) and its folders traversable but
    not listable (0711), the `private` ones root's alone (0700), and no file directly in the state dir or logs/
    readable by others (a job's output is its owner's: create_owned_file gives an owner's log 0640). The state dir is
    root's own, made by the supervisor: a link in it is left as it is, never followed. Raises OSError."""
    sd = Path(os.path.abspath(state_dir))
    for name in reached:
        (sd / name).mkdir(exist_ok=True)
    os.chmod(sd, 0o711)
    for folder in (sd, sd / "logs"):
        for entry in os.scandir(folder):
            if entry.is_symlink():
                continue
            if entry.is_dir() and folder == sd:
                os.chmod(entry.path, 0o700 if entry.name in private else 0o711)
            elif entry.is_file():
                os.chmod(entry.path, stat.S_IMODE(entry.stat().st_mode) & ~0o007)
