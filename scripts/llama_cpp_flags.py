"""Print the CMAKE_ARGS that build llama.cpp (llama-cpp-python's sdist) for this CPU.

`make bench` builds its peer with them. GGML_NATIVE=OFF with each x86 extension switched on
only where /proc/cpuinfo lists it: a native build (-march=native) has crashed with
"Illegal instruction" on a VM whose CPU flags change between the build and the run, and
the AMX paths stay off (they need the kernel's permission for AMX tile state). Elsewhere
(not Linux, not x86) it prints llama.cpp's defaults: nothing.
"""
from __future__ import annotations

import platform
from pathlib import Path

# /proc/cpuinfo flag -> llama.cpp's CMake option
FLAGS = {"avx": "GGML_AVX", "avx2": "GGML_AVX2", "fma": "GGML_FMA", "f16c": "GGML_F16C",
         "avx_vnni": "GGML_AVX_VNNI", "avx512f": "GGML_AVX512",
         "avx512vbmi": "GGML_AVX512_VBMI", "avx512_vnni": "GGML_AVX512_VNNI",
         "avx512_bf16": "GGML_AVX512_BF16"}
OFF = ("GGML_AMX_TILE", "GGML_AMX_INT8", "GGML_AMX_BF16")


def cmake_args(cpuinfo: str) -> str:
    flags = set()
    for line in cpuinfo.splitlines():
        if line.startswith("flags"):
            flags = set(line.split(":", 1)[1].split())
            break
    if not flags:
        return ""
    args = ["-DGGML_NATIVE=OFF"]
    args += [f"-D{option}={'ON' if flag in flags else 'OFF'}"
             for flag, option in FLAGS.items()]
    return " ".join(args + [f"-D{option}=OFF" for option in OFF])


if __name__ == "__main__":
    info = Path("/proc/cpuinfo")
    x86 = platform.machine().lower() in ("x86_64", "amd64")
    print(cmake_args(info.read_text()) if x86 and info.is_file() else "")
