// Probe cases on files and privileges: file capabilities, /proc/<pid>/fd and root, hard links, system files, planted setuid binaries.

package hostile

var probeFileCapabilities = probeCase{
	name:  "FileCapabilities",
	tries: "file capabilities and privileged xattrs on its own files: security.capability (CAP_SYS_ADMIN on a copy of python), trusted.* and security.* attributes",
	stops: "setting security.capability needs CAP_SETFCAP, trusted.* CAP_SYS_ADMIN (none); no_new_privs and nosuid mounts ignore file capabilities on exec besides",
	code: `
import shutil
p = '/tmp/cs-capbin'
shutil.copy(sys.executable, p)
# VFS_CAP_REVISION_2, effective, CAP_SYS_ADMIN (21) permitted.
cap = struct.pack('<IIIII', 0x02000001, 1 << 21, 0, 0, 0)
refused('security.capability', lambda: os.setxattr(p, 'security.capability', cap))
refused('trusted.x', lambda: os.setxattr(p, 'trusted.x', b'1'))
refused('security.evil', lambda: os.setxattr(p, 'security.evil', b'1'))
try:
    os.setxattr(p, 'user.ok', b'1'); print('control user xattr set')
except OSError:
    print('control user xattr unsupported')
r = subprocess.run([p, '-c', 'print(open("/proc/self/status").read().split("CapEff:")[1].split()[0])'], capture_output=True, timeout=20)
if r.stdout.strip() not in (b'0000000000000000', b''):
    bad('exec-capbin', r.stdout.strip().decode())
else:
    ok('exec-capbin', 'CapEff %s' % r.stdout.strip().decode())
os.unlink(p)
`,
}

var probeReopenThroughProcFd = probeCase{
	name:  "ReopenThroughProcFd",
	tries: "turning a read-only descriptor into a writable one by reopening /proc/self/fd/N (a read-only file of the image, the sandbox's resolv.conf and hosts, a read-only directory: /usr, /etc, and / unless it is the sandbox's own tmpfs)",
	stops: "reopening through /proc checks the file's own permissions and the mount's read-only flag again",
	code: `
for p in ('/etc/passwd', '/etc/hosts', '/etc/resolv.conf', '/etc/hostname', '/usr/bin/python3', sys.executable):
    try:
        fd = os.open(p, os.O_RDONLY)
    except OSError:
        continue
    refused('reopen-rw ' + p, lambda fd=fd: open('/proc/self/fd/%d' % fd, 'r+b'))
    os.close(fd)
# Directories of read-only mounts (the image's or the host's system
# directories) must stay read-only through a descriptor too. / itself is
# probed only when it is not the sandbox's own writable tmpfs (the local
# variant's root is one, by design: mkdir /x works there).
def root_is_own_tmpfs():
    root = None
    for l in open('/proc/self/mountinfo'):
        a, b = l.split(' - ', 1)
        if a.split()[4] == '/':
            root = (b.split()[0], a.split()[5].split(','))
    return root is not None and root[0] == 'tmpfs' and 'rw' in root[1]
dirs = ['/usr', '/etc']
if root_is_own_tmpfs():
    na('mkdir-at-root-fd', "/ is the sandbox's own writable tmpfs")
else:
    dirs.insert(0, '/')
for d in dirs:
    try:
        fd = os.open(d, os.O_RDONLY | os.O_DIRECTORY)
    except OSError:
        continue
    refused('mkdir-at-fd ' + d, lambda fd=fd: os.mkdir('cs-evil', dir_fd=fd))
    refused('create-at-proc-fd ' + d, lambda fd=fd: open('/proc/self/fd/%d/cs-evil' % fd, 'w'))
    os.close(fd)
`,
}

var probeHardlinks = probeCase{
	name:  "Hardlinks",
	tries: "hard links to files it does not own (the host's or root's: /etc/shadow, the agent, setuid programs) in its writable directories, to keep or change them",
	stops: "protected_hardlinks (linking needs ownership or read-write access) and mounts: the writable tmpfs are other file systems than the read-only root (EXDEV)",
	code: `
for src in ('/etc/shadow', '/etc/passwd', '/usr/bin/passwd', '/usr/local/libexec/code-sandboxes-agent', '/usr/bin/python3', '/proc/1/exe'):
    if not os.path.lexists(src):
        continue
    for d in ('/tmp', '/home/user'):
        dst = d + '/cs-link'
        def ln(src=src, dst=dst):
            os.link(src, dst)
            os.unlink(dst)
            return 'linked'
        refused('link %s -> %s' % (src, d), ln)
`,
}

var probeProcRootWrites = probeCase{
	name:  "ProcRootWrites",
	tries: "writes into the system directories through /proc's views of the root and the working directory (/proc/self/root, /proc/thread-self/root, /proc/1/root, /proc/self/cwd after chdir /, /proc/self/fd and /dev/fd of a descriptor of /, '..' past / from a descriptor of it): the build-jail trick of reaching the real root through /proc",
	stops: "those views resolve to the sandbox's own root, whose system directories are read-only mounts; the agent's /proc/1/root needs ptrace access (non-dumpable, another uid)",
	code: `
rootfd = os.open('/', os.O_RDONLY | os.O_DIRECTORY)
os.chdir('/')
views = ['/proc/self/root', '/proc/thread-self/root', '/proc/1/root', '/proc/self/cwd', '/proc/self/fd/%d' % rootfd, '/dev/fd/%d' % rootfd]
def own_root_tmpfs():
    for l in open('/proc/self/mountinfo'):
        a, b = l.split(' - ', 1)
        if a.split()[4] == '/':
            return b.split()[0] == 'tmpfs' and 'rw' in a.split()[5].split(',')
    return False
targets = ['etc/cs-evil', 'usr/cs-evil', 'usr/bin/cs-evil', 'etc/passwd']
if not own_root_tmpfs():
    targets.append('cs-evil')
else:
    na('write-at-root', "/ is the sandbox's own writable tmpfs")
def write(p):
    f = open(p, 'a')
    f.close()
    if p.endswith('cs-evil'):
        os.unlink(p)
    return 'written'
for v in views:
    for t in targets:
        refused('write %s/%s' % (v, t), lambda p=v + '/' + t: write(p))
    refused('mkdir %s/usr/cs-evil-dir' % v, lambda v=v: os.mkdir(v + '/usr/cs-evil-dir'))
# '..' from a descriptor of / stays at /.
def dotdot():
    fd = os.open('../../../..', os.O_RDONLY | os.O_DIRECTORY, dir_fd=rootfd)
    try:
        return write('/proc/self/fd/%d/etc/cs-evil' % fd)
    finally:
        os.close(fd)
refused('write ../../../../etc from a descriptor of /', dotdot)
os.close(rootfd)
`,
}

var probeSystemFileMetadata = probeCase{
	name:  "SystemFileMetadata",
	tries: "changing the system files and directories without writing to them: chmod, chown, utime, truncate, rename, unlink, rmdir, a symlink, FIFO or file planted in them, a user.* extended attribute (/etc/passwd, /etc/hosts, /etc/resolv.conf, the Python binary, /bin/sh, /usr/lib, /etc, the agent's binary)",
	stops: "read-only mounts (EROFS) and ownership: the sandbox's user owns none of them (EPERM/EACCES); a file bound by the runtime is busy (EBUSY)",
	code: `
files = [p for p in ('/etc/passwd', '/etc/hosts', '/etc/resolv.conf', '/bin/sh', os.path.realpath(sys.executable),
                     '/usr/local/libexec/code-sandboxes-agent', '/opt/code-sandboxes/code-sandboxes-agent') if os.path.lexists(p)]
dirs = [p for p in ('/etc', '/usr/lib', '/usr/bin') if os.path.isdir(p)]
before = {p: os.lstat(p) for p in files + dirs}
for p in files + dirs:
    refused('chmod ' + p, lambda p=p: os.chmod(p, 0o777))
    refused('chown ' + p, lambda p=p: os.chown(p, os.getuid(), os.getgid()))
    refused('utime ' + p, lambda p=p: os.utime(p, (0, 0)))
    refused('utime-now ' + p, lambda p=p: os.utime(p, None))
    refused('setxattr user ' + p, lambda p=p: os.setxattr(p, 'user.cs', b'x'))
    refused('rename ' + p, lambda p=p: os.rename(p, p + '.cs-moved'))
for p in files:
    refused('truncate ' + p, lambda p=p: os.truncate(p, 0))
    refused('unlink ' + p, lambda p=p: os.unlink(p))
for d in dirs:
    refused('rmdir ' + d, lambda d=d: os.rmdir(d))
    refused('symlink in ' + d, lambda d=d: os.symlink('/tmp/cs-evil', d + '/cs-evil'))
    refused('mkfifo in ' + d, lambda d=d: os.mkfifo(d + '/cs-evil'))
    refused('create in ' + d, lambda d=d: os.close(os.open(d + '/cs-evil', os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644)))
# Whatever the answers said, nothing of them changed.
for p, st in before.items():
    now = os.lstat(p) if os.path.lexists(p) else None
    if now is None or (now.st_mode, now.st_uid, now.st_gid, now.st_size, now.st_mtime_ns) != (st.st_mode, st.st_uid, st.st_gid, st.st_size, st.st_mtime_ns):
        bad('unchanged ' + p, 'CHANGED %r -> %r' % (st, now))
    else:
        ok('unchanged ' + p)
`,
}

var probeSetuidPlanted = probeCase{
	name:  "SetuidPlanted",
	tries: "a setuid/setgid program planted where the sandbox can write (/tmp, /home/user, /files, /dev/shm): its own copy of id with mode 6755, and, where the sandbox has a root user (sudo), one made root's by it, run as the sandbox's user",
	stops: "no_new_privs on every process (exec ignores the setuid and setgid bits) and, where set, nosuid on the writable mounts",
	code: `
import shutil, stat
status = open('/proc/self/status').read()
nnp = any(l.split()[1] == '1' for l in status.splitlines() if l.startswith('NoNewPrivs:'))
def mount_opts(d):
    best, opts = '', []
    for l in open('/proc/self/mountinfo'):
        a = l.split(' - ', 1)[0].split()
        mp = a[4]
        if (d == mp or d.startswith(mp.rstrip('/') + '/')) and len(mp) >= len(best):
            best, opts = mp, a[5].split(',')
    return opts
src = shutil.which('id')
uid, gid = str(os.geteuid()), str(os.getegid())
for d in ('/tmp', '/home/user', '/files', '/dev/shm'):
    if not os.path.isdir(d) or not os.access(d, os.W_OK):
        continue
    f = d + '/cs-suid'
    try:
        shutil.copy(src, f)
        os.chmod(f, 0o6755)
    except OSError as e:
        ok('plant ' + d, 'refused ' + en(e.errno))
        continue
    try:
        r = subprocess.run([f, '-u'], capture_output=True, text=True, timeout=30)
        g = subprocess.run([f, '-g'], capture_output=True, text=True, timeout=30)
    except OSError as e:
        ok('setuid-own ' + d, 'exec refused ' + en(e.errno) + (' (noexec mount)' if 'noexec' in mount_opts(d) else ''))
        os.unlink(f)
        continue
    how = 'nosuid mount' if 'nosuid' in mount_opts(d) else ('no_new_privs' if nnp else 'owned by the sandbox user')
    if r.stdout.strip() == uid and g.stdout.strip() == gid:
        ok('setuid-own ' + d, 'ran as %s/%s (%s)' % (uid, gid, how))
    else:
        bad('setuid-own ' + d, 'ran as %r/%r' % (r.stdout.strip(), g.stdout.strip()))
    os.unlink(f)
# A setuid-root program made by the sandbox's own root user (sudo).
sudo = shutil.which('sudo')
made = False
if sudo and uid != '0':
    f = '/tmp/cs-rsuid'
    r = subprocess.run([sudo, '-n', 'sh', '-c', 'cp %s %s && chown 0:0 %s && chmod 6755 %s' % (src, f, f, f)], capture_output=True, text=True, timeout=30)
    st = os.stat(f) if os.path.exists(f) else None
    # Root's, seen from the sandbox's user: 0, or the overflow uid where
    # the root user's uid is not mapped in the user's namespace.
    if r.returncode == 0 and st is not None and str(st.st_uid) != uid and st.st_mode & stat.S_ISUID:
        made = True
        r = subprocess.run([f, '-u'], capture_output=True, text=True, timeout=30)
        if r.stdout.strip() == uid:
            ok('setuid-root-made-by-sudo /tmp', 'owner %d, ran as %s (%s)' % (st.st_uid, uid, 'nosuid mount' if 'nosuid' in mount_opts('/tmp') else 'no_new_privs'))
        else:
            bad('setuid-root-made-by-sudo /tmp', 'ran as %r' % r.stdout.strip())
    subprocess.run([sudo, '-n', 'rm', '-f', f], capture_output=True, timeout=30)
    why = (r.stdout + r.stderr).strip()[:200]
if not made:
    na('setuid-root-made-by-sudo', ('no root user here to make one: ' + why) if sudo else 'no sudo in this sandbox')
`,
}
