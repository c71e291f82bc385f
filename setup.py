"""Builds webdataset_cpp._core with the project's CMake build (only the
extension target and wds::core, no tests or tools) for the Python running
this script. WDS_CMAKE_BUILD_DIR reuses a build directory; CMAKE_ARGS adds
configure arguments."""

import os
import shlex
import shutil
import subprocess
import sys

from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext

ROOT = os.path.dirname(os.path.abspath(__file__))


class CMakeBuild(build_ext):
    def build_extension(self, ext):
        build_dir = os.environ.get("WDS_CMAKE_BUILD_DIR") or os.path.join(
            os.path.abspath(self.build_temp), "cmake")
        configure = ["cmake", "-S", ROOT, "-B", build_dir, "-DCMAKE_BUILD_TYPE=Release",
                     "-DWDS_BUILD_TESTS=OFF", "-DWDS_BUILD_BENCHMARKS=OFF",
                     "-DWDS_BUILD_TOOLS=OFF", "-DWDS_BUILD_PYTHON=ON",
                     f"-DWDS_PYTHON_EXECUTABLE={sys.executable}"]
        if shutil.which("ninja"):
            configure += ["-G", "Ninja"]
        if shutil.which("ccache"):
            configure.append("-DCMAKE_CXX_COMPILER_LAUNCHER=ccache")
        configure += shlex.split(os.environ.get("CMAKE_ARGS", ""))
        subprocess.run(configure, check=True)
        jobs = os.environ.get("CMAKE_BUILD_PARALLEL_LEVEL", str(min(os.cpu_count() or 1, 2)))
        subprocess.run(["cmake", "--build", build_dir, "--target", "wds_python_core", "-j", jobs],
                       check=True)
        built = os.path.join(build_dir, "python", "webdataset_cpp")
        names = [n for n in os.listdir(built) if n.startswith("_core") and n.endswith(".so")]
        if len(names) != 1:
            raise RuntimeError(f"expected one _core*.so in {built}, found {names}")
        target = self.get_ext_fullpath(ext.name)
        os.makedirs(os.path.dirname(target), exist_ok=True)
        shutil.copyfile(os.path.join(built, names[0]), target)


# setuptools' own build directory stays out of the CMake build's (build/).
setup(ext_modules=[Extension("webdataset_cpp._core", sources=[])],
      cmdclass={"build_ext": CMakeBuild},
      options={"build": {"build_base": "build/setuptools"}})
