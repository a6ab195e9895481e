/* vcuda-lib.h — whether the libvcuda.so acceld hands to shared containers is there.
 *
 * A vGPU container and a DRA shared claim get the host file `vcudaLibrary` bind-mounted and
 * preloaded (docs/vgpu.md, docs/dra.md): without it the container either fails to start (the
 * runtime cannot mount a missing source) or, worse, runs with no quota at all. So acceld
 * refuses to serve a GPU in those modes while the file is missing or is not a shared library,
 * and says where it looked and how to fix it.
 *
 * Threads: any; it only opens and reads the file. */
#pragma once

#include <stddef.h>

/* 0 when path names a readable regular file that starts as an ELF object does; else -errno
 * (-ENOENT missing, -EACCES unreadable, -ENOEXEC not a shared library, …) with err (errlen
 * bytes) saying what was found at path and what to do. */
int vcuda_lib_check(const char *path, char *err, size_t errlen);
