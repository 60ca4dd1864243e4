#!/usr/bin/env python3
"""Builds mdring_torch for the PyTorch of this interpreter (pip's or a venv's
torch >= 2, where there is no libtorch-dev for CMake to find), with torch's own
extension builder (torch.utils.cpp_extension: its compiler flags, its pybind11,
its libraries):

    python3 python/build_ext.py --out build-torch [--cuda-object group_cuda.o] [--no-ucx] [--no-mpi] [-j N]
    PYTHONPATH=build-torch python3 -c "import mdring_torch"

  --cuda-object FILE  the CUDA group (python/csrc/group_cuda.cu) compiled already,
                      e.g. on a machine without a GPU:
                        nvcc -std=c++20 -O2 -arch=sm_90 -Xcompiler -fPIC -Iinclude -Ipython/csrc \\
                             -c python/csrc/group_cuda.cu -o group_cuda.o
                      without it, and with torch.version.cuda and nvcc, it is compiled here
  --no-cuda           CPU tensors only
  --ucx PREFIX        UCX's install prefix (default: found by pkg-config, else none)
  --mpi / --no-mpi    with MPI (mpicxx --showme) or without

The CMake build (CMakeLists.txt, python/CMakeLists.txt) builds the same module
wherever torch's CMake config is found; this script is for the rest.
"""
import argparse
import os
import shutil
import subprocess
import sys
import sysconfig

import torch
from torch.utils import cpp_extension

here = os.path.dirname(os.path.abspath(__file__))
root = os.path.dirname(here)
csrc = os.path.join(here, "csrc")

ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
ap.add_argument("--out", required=True)
ap.add_argument("--cuda-object")
ap.add_argument("--no-cuda", action="store_true")
ap.add_argument("--ucx")
ap.add_argument("--no-ucx", action="store_true")
ap.add_argument("--mpi", dest="mpi", action="store_true", default=None)
ap.add_argument("--no-mpi", dest="mpi", action="store_false")
ap.add_argument("--nvcc-arch", default="sm_90")
ap.add_argument("-j", type=int, default=os.cpu_count() or 2)
args = ap.parse_args()

pkg = os.path.join(os.path.abspath(args.out), "mdring_torch")
os.makedirs(pkg, exist_ok=True)
shutil.copy(os.path.join(here, "mdring_torch", "__init__.py"), os.path.join(pkg, "__init__.py"))
build = os.path.join(os.path.abspath(args.out), "build")
os.makedirs(build, exist_ok=True)

cflags = ["-std=c++20", "-O2", f"-I{os.path.join(root, 'include')}", f"-I{csrc}"]
ldflags = []
sources = [os.path.join(csrc, f) for f in ("backend.cpp", "group_common.cpp")]
have = {}


def pkg_config(name, what):
    try:
        return subprocess.check_output(["pkg-config", what, name], text=True).split()
    except (OSError, subprocess.CalledProcessError):
        return None


# UCX: CPU tensors under torchrun.
ucx_c = ucx_l = None
if not args.no_ucx:
    if args.ucx:
        ucx_c, ucx_l = [f"-I{args.ucx}/include"], [f"-L{args.ucx}/lib", f"-Wl,-rpath,{args.ucx}/lib",
                                                  "-lucp", "-luct", "-lucs", "-lucm"]
    else:
        ucx_c, ucx_l = pkg_config("ucx", "--cflags"), pkg_config("ucx", "--libs")
have["ucx"] = ucx_l is not None
if have["ucx"]:
    cflags += ucx_c
    ldflags += ucx_l
    sources.append(os.path.join(csrc, "group_ucx.cpp"))
else:
    sources.append(os.path.join(csrc, "group_noucx.cpp"))

# MPI: CPU tensors under mpirun.
mpi_c = mpi_l = None
if args.mpi is not False and shutil.which("mpicxx"):
    try:
        mpi_c = subprocess.check_output(["mpicxx", "--showme:compile"], text=True).split()
        mpi_l = subprocess.check_output(["mpicxx", "--showme:link"], text=True).split()
    except (OSError, subprocess.CalledProcessError):
        mpi_c = mpi_l = None
if args.mpi and mpi_l is None:
    sys.exit("build_ext: --mpi, but mpicxx --showme gave nothing")
have["mpi"] = mpi_l is not None
if have["mpi"]:
    cflags += mpi_c + ["-DOMPI_SKIP_MPICXX=1", "-DMPICH_SKIP_MPICXX=1"]
    ldflags += mpi_l
    sources.append(os.path.join(csrc, "group_mpi.cpp"))
else:
    sources.append(os.path.join(csrc, "group_nompi.cpp"))

# CUDA tensors: the device group, compiled by nvcc (here or beforehand).
cuda_home = cpp_extension.CUDA_HOME or "/usr/local/cuda"
have["cuda"] = not args.no_cuda and bool(torch.version.cuda)
extra_objects = []
if have["cuda"]:
    cflags.append("-DMDRING_TORCH_CUDA=1")
    cflags.append(f"-I{cuda_home}/include")
    obj = args.cuda_object
    if not obj:
        obj = os.path.join(build, "group_cuda.o")
        nvcc = os.path.join(cuda_home, "bin", "nvcc")
        cmd = [nvcc, "-std=c++20", "-O2", f"-arch={args.nvcc_arch}", "-Xcompiler", "-fPIC",
               f"-I{os.path.join(root, 'include')}", f"-I{csrc}", "-c", os.path.join(csrc, "group_cuda.cu"), "-o", obj]
        print("build_ext:", " ".join(cmd), flush=True)
        subprocess.check_call(cmd)
    extra_objects.append(os.path.abspath(obj))
    # NCCL (the group's non-node-local dimensions): the one torch ships, else the toolkit's.
    nccl_dirs = [os.path.join(p, "nvidia", "nccl", "lib") for p in sys.path if p]
    nccl_dirs.append(os.path.join(cuda_home, "lib64"))
    for d in nccl_dirs:
        if os.path.exists(os.path.join(d, "libnccl.so.2")):
            ldflags += [f"-L{d}", f"-Wl,-rpath,{d}", "-l:libnccl.so.2"]
            break
    ldflags += [f"-L{cuda_home}/lib64", "-lcudart"]
else:
    sources.append(os.path.join(csrc, "group_nocuda.cpp"))

# The C++ runtime, shared. Where the compiler finds no libstdc++.so (a toolchain
# installed without its development link), g++ links libstdc++.a into the module:
# a second copy of the runtime beside the one torch uses, whose locale facets do not
# match the process's (formatting a number in an error message then crashed the
# process under torch 2.11). Name the shared library itself then.
cxx = os.environ.get("CXX", "c++")
try:
    found = subprocess.check_output([cxx, "-print-file-name=libstdc++.so"], text=True).strip()
except (OSError, subprocess.CalledProcessError):
    found = ""
if sys.platform.startswith("linux") and not os.path.isabs(found):
    print(f"build_ext: {cxx} finds no libstdc++.so; linking libstdc++.so.6 by name", flush=True)
    ldflags.append("-l:libstdc++.so.6")

os.environ.setdefault("MAX_JOBS", str(args.j))
print(f"build_ext: torch {torch.__version__} (CUDA {torch.version.cuda}), UCX {have['ucx']}, MPI {have['mpi']}, "
      f"CUDA tensors {have['cuda']}", flush=True)
cpp_extension.load(name="_C", sources=sources, extra_cflags=cflags, extra_ldflags=extra_objects + ldflags,
                   build_directory=build, with_cuda=have["cuda"], verbose=False, is_python_module=True)
for f in os.listdir(build):
    if f.startswith("_C") and f.endswith(".so"):
        shutil.copy(os.path.join(build, f), os.path.join(pkg, "_C" + sysconfig.get_config_var("EXT_SUFFIX")))
# A module that defines the C++ runtime's own symbols carries a copy of it (above).
built = os.path.join(pkg, "_C" + sysconfig.get_config_var("EXT_SUFFIX"))
if shutil.which("nm"):
    defined = subprocess.run(["nm", "-D", "--defined-only", built], capture_output=True, text=True).stdout
    copied = [line.split()[-1] for line in defined.splitlines() if line.split()[-1].startswith(("_ZNSo", "_ZNSt6locale"))]
    if copied:
        sys.exit(f"build_ext: {built} carries its own copy of the C++ runtime (it defines {copied[0]} and "
                 f"{len(copied) - 1} more): linked with libstdc++.a, which breaks number formatting beside torch. "
                 f"Install the compiler's libstdc++ development package (the libstdc++.so link), or set CXX")
print(f"build_ext: built {pkg}", flush=True)
