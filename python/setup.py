"""Builds mdring_torch (the torch.distributed backend "mdring") for the torch of the
interpreter that runs pip, with torch's own extension builder
(torch.utils.cpp_extension: its compiler flags, its pybind11, its libraries):

    python3 -m pip install --no-build-isolation ./python          (from the mdring source tree)
    python3 -m pip install --no-build-isolation --no-index --target DIR ./python   (not installed: PYTHONPATH=DIR)

--no-build-isolation: the extension is built against the torch installed in this
interpreter (pip's isolated build environment has none). The headers come from
include/ beside python/. The version is include/mdring/config.hpp's
MDRING_VERSION_MAJOR/MINOR/PATCH (also mdring_torch.__version__, from the module).

What the build takes, from the environment (unset: found here, as CMake does):
  MDRING_TORCH_UCX=0|1|PREFIX   UCX (CPU tensors under torchrun): 0 without, 1
                                required (pkg-config ucx), or UCX's install prefix
  MDRING_TORCH_MPI=0|1          MPI (CPU tensors under mpirun): 0 without, 1
                                required (mpicxx --showme)
  MDRING_TORCH_CUDA=0|1         CUDA tensors (a CUDA build of torch, nvcc): 0
                                without, 1 required
  MDRING_TORCH_CUDA_OBJECT=FILE python/csrc/group_cuda.cu compiled already (e.g.
                                on a machine without a GPU: scripts/gpu-bundle.sh);
                                else nvcc (CUDA_HOME's) compiles it here
  MDRING_TORCH_NVCC_ARCH=sm_90  nvcc's -arch (default: the GPU's here, else sm_90)
  MDRING_TORCH_BUILD_DIR=DIR    setuptools' build tree (default: build-pip beside
                                python/; kept, so that a rebuild compiles only what
                                changed)
  MAX_JOBS=N                    parallel compiles (torch's builder; ninja's default
                                otherwise)
The CMake build (python/CMakeLists.txt) builds the same module where torch's CMake
config is found (Debian: libtorch-dev).
"""
import os
import re
import shutil
import subprocess
import sys

here = os.path.dirname(os.path.abspath(__file__))
root = os.path.dirname(here)
include = os.path.join(root, "include")
csrc = os.path.join(here, "csrc")
os.chdir(here)  # the sources are named relative to python/

try:
    import torch
    from torch.utils import cpp_extension
except ImportError as e:
    sys.exit(f"mdring_torch: this interpreter ({sys.executable}) cannot import torch ({e}). mdring_torch is built "
             "against the torch installed in the interpreter that runs pip, so install torch there first, and build "
             "without pip's isolated build environment (which has no torch): "
             "pip install --no-build-isolation ./python")
from setuptools import setup  # noqa: E402


def fail(message):
    sys.exit(f"mdring_torch: {message}")


def mdring_version():
    """include/mdring/config.hpp's MDRING_VERSION_MAJOR/MINOR/PATCH."""
    path = os.path.join(include, "mdring", "config.hpp")
    if not os.path.isfile(path):
        fail(f"{path} not found: mdring_torch builds from the mdring source tree (python/ beside include/)")
    parts = dict(re.findall(r"^#define MDRING_VERSION_(MAJOR|MINOR|PATCH) ([0-9]+)$", open(path).read(), re.M))
    if len(parts) != 3:
        fail(f"{path} lacks one of #define MDRING_VERSION_MAJOR, _MINOR, _PATCH")
    return f"{parts['MAJOR']}.{parts['MINOR']}.{parts['PATCH']}"


def setting(name):
    v = os.environ.get(name, "")
    if v not in ("", "0", "1") and not (name == "MDRING_TORCH_UCX" and os.path.isabs(v)):
        fail(f'{name} must be 0 or 1{" or an absolute prefix" if name == "MDRING_TORCH_UCX" else ""}, not "{v}"')
    return v


def pkg_config(name, what):
    try:
        return subprocess.check_output(["pkg-config", what, name], text=True, stderr=subprocess.DEVNULL).split()
    except (OSError, subprocess.CalledProcessError):
        return None


# -g0: Python's own flags (sysconfig's CFLAGS, which setuptools puts first) ask for
# debug information, 4 times the module's size.
cflags = ["-std=c++20", "-O2", "-g0", f"-I{include}", f"-I{csrc}"]
ldflags = []
sources = ["csrc/backend.cpp", "csrc/group_common.cpp"]
have = {}

# UCX: CPU tensors under torchrun.
ucx = setting("MDRING_TORCH_UCX")
ucx_c = ucx_l = None
if os.path.isabs(ucx):
    ucx_c, ucx_l = [f"-I{ucx}/include"], [f"-L{ucx}/lib", f"-Wl,-rpath,{ucx}/lib", "-lucp", "-luct", "-lucs", "-lucm"]
elif ucx != "0":
    ucx_c, ucx_l = pkg_config("ucx", "--cflags"), pkg_config("ucx", "--libs")
    if ucx == "1" and ucx_l is None:
        fail("MDRING_TORCH_UCX=1, but pkg-config finds no ucx (Debian: libucx-dev)")
have["ucx"] = ucx_l is not None
if have["ucx"]:
    cflags += ucx_c
    ldflags += ucx_l
sources.append("csrc/group_ucx.cpp" if have["ucx"] else "csrc/group_noucx.cpp")

# MPI: CPU tensors under mpirun.
mpi = setting("MDRING_TORCH_MPI")
mpi_c = mpi_l = None
if mpi != "0" and shutil.which("mpicxx"):
    try:
        mpi_c = subprocess.check_output(["mpicxx", "--showme:compile"], text=True).split()
        mpi_l = subprocess.check_output(["mpicxx", "--showme:link"], text=True).split()
    except (OSError, subprocess.CalledProcessError):
        mpi_c = mpi_l = None
if mpi == "1" and mpi_l is None:
    fail("MDRING_TORCH_MPI=1, but mpicxx --showme gave nothing (Debian: libopenmpi-dev)")
have["mpi"] = mpi_l is not None
if have["mpi"]:
    cflags += mpi_c + ["-DOMPI_SKIP_MPICXX=1", "-DMPICH_SKIP_MPICXX=1"]
    ldflags += mpi_l
sources.append("csrc/group_mpi.cpp" if have["mpi"] else "csrc/group_nompi.cpp")

# CUDA tensors: the device group, compiled by nvcc (at build time, or beforehand:
# MDRING_TORCH_CUDA_OBJECT) and linked as an object.
cuda = setting("MDRING_TORCH_CUDA")
cuda_object = os.environ.get("MDRING_TORCH_CUDA_OBJECT", "")
cuda_home = cpp_extension.CUDA_HOME or "/usr/local/cuda"
have["cuda"] = cuda != "0" and bool(torch.version.cuda)
if cuda == "1" and not torch.version.cuda:
    fail(f"MDRING_TORCH_CUDA=1, but torch {torch.__version__} is not a CUDA build")
if cuda_object and not have["cuda"]:
    fail(f"MDRING_TORCH_CUDA_OBJECT is set, but the build takes no CUDA tensors (torch {torch.__version__}, "
         f"CUDA {torch.version.cuda}, MDRING_TORCH_CUDA={cuda or 'unset'})")
if cuda_object and not os.path.isfile(cuda_object):
    fail(f"MDRING_TORCH_CUDA_OBJECT={cuda_object}: no such file")
if have["cuda"]:
    cflags += ["-DMDRING_TORCH_CUDA=1", f"-I{cuda_home}/include"]
    # NCCL (the group's non-node-local dimensions): the one torch ships, else the toolkit's.
    nccl_dirs = [os.path.join(p, "nvidia", "nccl", "lib") for p in sys.path if p]
    nccl_dirs.append(os.path.join(cuda_home, "lib64"))
    for d in nccl_dirs:
        if os.path.exists(os.path.join(d, "libnccl.so.2")):
            ldflags += [f"-L{d}", f"-Wl,-rpath,{d}", "-l:libnccl.so.2"]
            break
    ldflags += [f"-L{cuda_home}/lib64", "-lcudart"]
else:
    sources.append("csrc/group_nocuda.cpp")


def nvcc_command(obj):
    """The CUDA group's compile (scripts/gpu-bundle.sh runs the same for sm_90)."""
    arch = os.environ.get("MDRING_TORCH_NVCC_ARCH", "")
    if not arch:
        arch = "sm_%d%d" % torch.cuda.get_device_capability() if torch.cuda.is_available() else "sm_90"
    return [os.path.join(cuda_home, "bin", "nvcc"), "-std=c++20", "-O2", f"-arch={arch}", "-Xcompiler", "-fPIC",
            f"-I{include}", f"-I{csrc}", "-c", os.path.join(csrc, "group_cuda.cu"), "-o", obj]


def runtime_link_flags(cxx):
    """The C++ runtime, shared. Where the compiler finds no libstdc++.so (a toolchain
    installed without its development link), g++ links libstdc++.a into the module: a
    second copy of the runtime beside the one torch uses, whose locale facets do not
    match the process's (formatting a number in an error message then crashed the
    process under torch 2.11). Name the shared library itself then."""
    try:
        found = subprocess.check_output([cxx, "-print-file-name=libstdc++.so"], text=True).strip()
    except (OSError, subprocess.CalledProcessError):
        found = ""
    if sys.platform.startswith("linux") and not os.path.isabs(found):
        print(f"mdring_torch: {cxx} finds no libstdc++.so; linking libstdc++.so.6 by name", flush=True)
        return ["-l:libstdc++.so.6"]
    return []


def check_runtime(built):
    """Fails when the module defines the C++ runtime's own symbols: it carries a copy
    of the runtime (linked with libstdc++.a, see runtime_link_flags)."""
    if not shutil.which("nm"):
        return
    defined = subprocess.run(["nm", "-D", "--defined-only", built], capture_output=True, text=True).stdout
    copied = [w[-1] for w in map(str.split, defined.splitlines()) if w and w[-1].startswith(("_ZNSo", "_ZNSt6locale"))]
    if copied:
        fail(f"{built} carries its own copy of the C++ runtime (it defines {copied[0]} and {len(copied) - 1} more): "
             "linked with libstdc++.a, which breaks number formatting beside torch. Install the compiler's libstdc++ "
             "development package (the libstdc++.so link), or set CXX")


class build_ext(cpp_extension.BuildExtension):
    def build_extensions(self):
        # ninja knows what changed, headers included; setuptools would compare only
        # the sources' times with the module's and skip a rebuild after a header's edit.
        self.force = True
        # The command that links a C++ extension: linker_so_cxx in newer setuptools,
        # else compiler_cxx (CXX, or Python's own).
        linker = getattr(self.compiler, "linker_so_cxx", None) or self.compiler.compiler_cxx
        cxx = (linker or [os.environ.get("CXX", "c++")])[0]
        for ext in self.extensions:
            ext.extra_link_args += runtime_link_flags(cxx)
            if have["cuda"]:
                obj = cuda_object
                if not obj:
                    obj = os.path.join(os.path.abspath(self.build_temp), "group_cuda.o")
                    os.makedirs(os.path.dirname(obj), exist_ok=True)
                    cmd = nvcc_command(obj)
                    print("mdring_torch:", " ".join(cmd), flush=True)
                    subprocess.check_call(cmd)
                ext.extra_objects.append(os.path.abspath(obj))
        print(f"mdring_torch {mdring_version()}: torch {torch.__version__} (CUDA {torch.version.cuda}), "
              f"UCX {have['ucx']}, MPI {have['mpi']}, CUDA tensors {have['cuda']}", flush=True)
        super().build_extensions()
        for ext in self.extensions:
            check_runtime(self.get_ext_fullpath(ext.name))


build_dir = os.path.abspath(os.environ.get("MDRING_TORCH_BUILD_DIR") or os.path.join(root, "build-pip"))
os.makedirs(build_dir, exist_ok=True)
Extension = cpp_extension.CUDAExtension if have["cuda"] else cpp_extension.CppExtension
setup(
    version=mdring_version(),
    packages=["mdring_torch"],
    ext_modules=[Extension("mdring_torch._C", sources, extra_compile_args={"cxx": cflags}, extra_link_args=ldflags)],
    cmdclass={"build_ext": build_ext},
    # Nothing written beside the sources: the build tree and the metadata go to build_dir.
    options={"build": {"build_base": build_dir}, "egg_info": {"egg_base": build_dir}},
)
