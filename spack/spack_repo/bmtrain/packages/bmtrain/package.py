# Spack recipe for bmtrain, Spack >= 1.0 repository layout (package API v2).
# spack/packages/bmtrain/package.py is the same recipe for Spack before 1.0; the two differ only in
# this header and their imports (the ctest install_spack_recipes checks that).
import os

from spack_repo.builtin.build_systems.cmake import CMakePackage
from spack_repo.builtin.build_systems.cuda import CudaPackage

from spack.package import *


def _source_tree():
    """The bmtrain checkout this recipe lives in (the folder holding CMakeLists.txt and spack/)."""
    here = os.path.dirname(os.path.abspath(__file__))
    while os.path.dirname(here) != here:
        if os.path.isfile(os.path.join(here, "CMakeLists.txt")) and os.path.isdir(
            os.path.join(here, "spack")
        ):
            return here
        here = os.path.dirname(here)
    return None


class Bmtrain(CMakePackage, CudaPackage):
    """ZeRO-3 training of transformer models too big for one GPU, from C++, on MPI clusters.

    Every parameter, gradient and optimizer state is sharded across ranks; checkpointed transformer
    blocks gather their parameters just in time while communication hides behind computation. MPI
    starts the job; Kokkos kernels run the same code on CPUs (MPI collectives, BLAS) and NVIDIA GPUs
    (NCCL, cuBLASLt). Installs the library with a CMake package config (find_package(bmtrain),
    target bmtrain::bmtrain) and the trainer bmt-train.
    """

    # The project has no public web page or repository host: its README is its home page and the
    # sources come from the git repository this recipe lives in. A site that keeps the project
    # elsewhere points Spack there in packages.yaml (packages: bmtrain: package_attributes: git:
    # <url>), and `spack mirror create` archives a version pinned to a commit for machines that
    # reach neither (docs/INSTALL.md, "Spack").
    # No maintainers(): the repository names no maintainer accounts.
    _checkout = _source_tree()
    if _checkout:
        homepage = "file://" + os.path.join(_checkout, "README.md")
        git = "file://" + _checkout

    license("Apache-2.0")

    # The branch main: the repository has no release tags yet. A release is added as
    # version("x.y.z", tag="vx.y.z", commit="<the 40-hex commit the tag names>"), the commit being
    # the checksum (a moved tag fails the fetch); `spack develop` builds a working copy instead.
    version("main", branch="main")

    variant("openmp", default=False, description="Require Kokkos' OpenMP backend for the host kernels")
    variant("tests", default=False, description="Build the test suite and benchmarks (ctest)")
    variant("shared", default=False, description="Build libbmtrain as a shared library")

    # Kokkos builds for one GPU architecture, and bmtrain follows it: one cuda_arch, not a list.
    variant(
        "cuda_arch",
        description="CUDA architecture (one: Kokkos compiles for a single one)",
        values=("none",) + CudaPackage.cuda_arch_values,
        default="none",
        multi=False,
        sticky=True,
        when="+cuda",
    )
    conflicts("+cuda", when="cuda_arch=none", msg="+cuda needs a cuda_arch, e.g. cuda_arch=90")

    depends_on("cxx", type="build")  # C++ only: MPI is found through its C++ component
    depends_on("cmake@3.25:", type="build")

    depends_on("mpi")
    depends_on("nlohmann-json@3.9:")
    depends_on("cli11", type="build")  # bmt-train's command line, header-only

    # Kokkos 3.4 to 4.x (5.x needs C++20; bmtrain is C++17). The host kernels run on Kokkos'
    # default host backend: +openmp asks for a Kokkos with OpenMP; ~openmp asks nothing of it, so
    # an existing kokkos+openmp serves too (the kernels then run on OpenMP).
    depends_on("kokkos@3.4:4 +serial")
    depends_on("kokkos+openmp", when="+openmp")
    # The CUDA build takes Kokkos 4 only, as docs/INSTALL.md says (Kokkos 3's CUDA backend
    # predates the CUDA versions and GPUs the build targets). The library compiles its sources as
    # the CUDA language (CMake), so Kokkos must too (+cmake_lang).
    depends_on("kokkos@4: +cuda+cmake_lang", when="+cuda")
    # KOKKOS_LAMBDA on the device needs extended lambdas: always on from Kokkos 4.1, an option
    # before (deprecated from 4.1; Spack's Kokkos 5 has no such variant), so asked only of those
    # versions. A conflict, since a dependency conditional on Kokkos itself fails `spack audit`.
    conflicts(
        "^kokkos@:4.0 ~cuda_lambda",
        when="+cuda",
        msg="Kokkos before 4.1 needs +cuda_lambda for bmtrain's device lambdas",
    )
    depends_on("kokkos~cuda", when="~cuda")
    depends_on("nccl+cuda", when="+cuda")
    for _arch in CudaPackage.cuda_arch_values:
        depends_on(f"kokkos+cuda cuda_arch={_arch}", when=f"+cuda cuda_arch={_arch}")
        depends_on(f"nccl cuda_arch={_arch}", when=f"+cuda cuda_arch={_arch}")
    # The host GEMM calls cblas_sgemm from cblas.h, so the BLAS provider must install the CBLAS
    # interface with its header (BLIS and netlib-lapack build it by default; OpenBLAS's symbols
    # must keep their names). cmake_args passes the provider's libraries and header directory.
    depends_on("blas", when="~cuda")
    requires(
        "^[virtuals=blas] openblas symbol_suffix=none",
        "^[virtuals=blas] blis+cblas",
        "^[virtuals=blas] amdblis+cblas",
        "^[virtuals=blas] netlib-lapack",
        policy="one_of",
        when="~cuda",
        msg="bmtrain's host build calls cblas_sgemm: it needs a BLAS provider with the CBLAS "
        "interface (openblas, blis, amdblis or netlib-lapack)",
    )

    depends_on("googletest", type=("build", "test"), when="+tests")
    depends_on("benchmark", type=("build", "test"), when="+tests")

    def cmake_args(self):
        spec = self.spec
        args = [
            self.define_from_variant("BMT_ENABLE_CUDA", "cuda"),
            self.define_from_variant("BMT_ENABLE_TESTS", "tests"),
            self.define_from_variant("BMT_ENABLE_BENCHMARKS", "tests"),
            self.define_from_variant("BUILD_SHARED_LIBS", "shared"),
            self.define("BMT_ENABLE_APPS", True),
            self.define("Kokkos_ROOT", spec["kokkos"].prefix),
        ]
        if spec.satisfies("~cuda"):
            args += self._blas_args()
        if spec.satisfies("+cuda"):
            args += [
                self.define("CMAKE_CUDA_COMPILER", join_path(spec["cuda"].prefix.bin, "nvcc")),
                self.define("CMAKE_CUDA_ARCHITECTURES", spec.variants["cuda_arch"].value),
                self.define("CUDAToolkit_ROOT", spec["cuda"].prefix),
                self.define("NCCL_ROOT", spec["nccl"].prefix),
            ]
        return args

    def _blas_args(self):
        """The CBLAS libraries and cblas.h's directory of the BLAS provider, for the host GEMM."""
        # blas:c,fortran: netlib-lapack keeps CBLAS in a library of its own (libcblas next to
        # libblas); OpenBLAS and BLIS have one library and ignore the query.
        blas = self.spec["blas:c,fortran"]
        headers = [h for h in blas.headers if os.path.basename(h) == "cblas.h"]
        if not headers:
            raise InstallError(
                f"bmtrain needs cblas.h: expected it from the BLAS provider {blas.name}, "
                f"found none under {blas.prefix.include}"
            )
        return [
            self.define("BMT_BLAS_LIBRARIES", list(blas.libs)),
            self.define("CBLAS_INCLUDE_DIR", os.path.dirname(headers[0])),
        ]

    def check(self):
        """The ctest suite over the build tree (spack install --test=root, with +tests).

        Spack removes every environment variable ending in _ROOT from the build, so Open MPI's
        OMPI_ALLOW_RUN_AS_ROOT cannot reach mpirun there: the tests' launch line carries
        --allow-run-as-root itself whenever the build was configured as root
        (cmake/BmtTesting.cmake), which is what a root build under Spack needs.
        """
        if self.spec.satisfies("~tests"):
            print("bmtrain: built without +tests, no tests to run")
            return
        ctest = Executable(self.spec["cmake"].prefix.bin.ctest)
        # Oversubscribed MPI tests must not spin: idle ranks yield the core.
        os.environ["OMPI_MCA_mpi_yield_when_idle"] = "1"
        with working_dir(self.builder.build_directory):
            ctest("--output-on-failure", "--timeout", "900")

    def _launcher(self):
        """mpiexec of the MPI this was built with, and the flags a one-rank run needs."""
        mpiexec = which("mpiexec", "mpirun", path=self.spec["mpi"].prefix.bin)
        if mpiexec is None:
            raise SkipTest(f"no mpiexec or mpirun in {self.spec['mpi'].prefix.bin}")
        flags = ["-n", "1"]
        # Same reason as in check(): OMPI_ALLOW_RUN_AS_ROOT does not survive Spack's environment.
        if self.spec.satisfies("^openmpi") and os.geteuid() == 0:
            flags.append("--allow-run-as-root")
        return mpiexec, flags

    def test_help(self):
        """bmt-train --help runs as a plain process and lists its options"""
        bmt_train = which("bmt-train", path=self.prefix.bin, required=True)
        out = bmt_train("--help", output=str, error=str)
        for option in ("--model", "--steps", "--batch"):
            assert option in out, f"expected '{option}' in bmt-train --help, found:\n{out}"

    def test_tiny_run(self):
        """one MPI rank trains the tiny model for two steps"""
        mpiexec, flags = self._launcher()
        bmt_train = join_path(self.prefix.bin, "bmt-train")
        tiny = ["--model", "tiny", "--steps", "2", "--batch", "4", "--seq", "32", "--no-progress"]
        out = mpiexec(*flags, bmt_train, *tiny, output=str, error=str)
        assert "trained 2 steps" in out, f"expected 'trained 2 steps' in the output, found:\n{out}"
