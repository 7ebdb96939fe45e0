"""Notebook 04's save_checkpoint task: its planted mistakes (tests/test_04_*.py).

Each is REFERENCE edited (tests/task_kit.py, planted).

SHARED: they were written against a plainer save than the reference's: no shares (the other
task's answer), no docstring, rank 0 alone saving to path + ".tmp" and os.replace()-ing it, with
no flush or fsync.
"""

REFERENCE = "solutions/04_a_real_ddp_training_loop.py"
# the reference's module docstring: each mistake's own replaces it
DOC = '"""Reference answers for notebook 04 (used only when COURSE_SOLUTIONS is set)."""\n'
SHARED = [
    ('''\
# DistributedSampler, 11 samples, 4 ranks, shuffle=False: the indices padded to 12 by repeating
# the first one, rank r taking every 4th from r; drop_last=True cuts them to 8 instead
shares = [[[0, 4, 8], [1, 5, 9], [2, 6, 10], [3, 7, 0]], [[0, 4], [1, 5], [2, 6], [3, 7]]]

''', ""),
    ('''\
    """Rank 0: write state to path; a crash at any moment leaves the old file or the new one."""
    if rank != 0:
        return  # the replicas are identical: one writer
    tmp = path + ".tmp"  # beside the checkpoint: the same file system, so the rename is atomic
    with open(tmp, "wb") as f:
        torch.save(state, f)
        f.flush()
        os.fsync(f.fileno())  # the bytes on the disk before the name points at them (power loss)
    os.replace(tmp, path)  # one step: a reader finds the old file or the new one, whole
''', '''\
    if rank == 0:
        torch.save(state, path + ".tmp")
        os.replace(path + ".tmp", path)
'''),
]
MISTAKES = {
    "copied_not_renamed": [
        (DOC,
         '"""Copies the finished temporary file over the checkpoint instead of renaming it."""\n'),
        ("import os\n", "import shutil\n"),
        ('        os.replace(path + ".tmp", path)\n',
         '        shutil.copyfile(path + ".tmp", path)\n'),
    ],
    "every_rank": [
        (DOC, '"""Saves on every rank (ignores rank)."""\n'),
        ('''\
    if rank == 0:
        torch.save(state, path + ".tmp")
        os.replace(path + ".tmp", path)
''', '''\
    torch.save(state, path + ".tmp")
    os.replace(path + ".tmp", path)
'''),
    ],
    "final_path_directly": [
        (DOC, '''\
"""Writes the checkpoint's own path: a crash mid-write leaves half a file there."""
'''),
        ('''\

import os
''', ""),
        ('''\
        torch.save(state, path + ".tmp")
        os.replace(path + ".tmp", path)
''', '''\
        torch.save(state, path)
'''),
    ],
    "never_renamed": [
        (DOC,
         '"""Writes the temporary file and stops there: the checkpoint is never replaced."""\n'),
        ('''\

import os
''', ""),
        ('        os.replace(path + ".tmp", path)\n', ""),
    ],
    "old_removed_first": [
        (DOC, '"""Deletes the old checkpoint before the new one is written."""\n'),
        ('''\
    if rank == 0:
''', '''\
    if rank == 0:
        if os.path.exists(path):
            os.remove(path)
'''),
    ],
    "renamed_before_written": [
        (DOC,
         '"""Opens the temporary file, renames it over the checkpoint, then writes into it."""\n'),
        ('''\
        torch.save(state, path + ".tmp")
        os.replace(path + ".tmp", path)
''', '''\
        f = open(path + ".tmp", "wb")
        os.replace(path + ".tmp", path)
        torch.save(state, f)
        f.close()
'''),
    ],
    "replace_arguments_swapped": [
        (DOC, '''\
"""os.replace(dst, src): moves the old checkpoint onto the temporary file's name."""
'''),
        ('        os.replace(path + ".tmp", path)\n', '        os.replace(path, path + ".tmp")\n'),
    ],
    "temp_in_another_dir": [
        (DOC, '''\
"""A temporary file in the system's temp directory (perhaps another file system), moved over."""
'''),
        ('''\
import os
''', '''\
import os
import shutil
import tempfile
'''),
        ('''\
        torch.save(state, path + ".tmp")
        os.replace(path + ".tmp", path)
''', '''\
        fd, tmp = tempfile.mkstemp(suffix=".pt")
        os.close(fd)
        torch.save(state, tmp)
        shutil.move(tmp, path)
'''),
    ],
}
