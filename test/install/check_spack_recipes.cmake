# The two Spack recipes (classic layout and Spack >= 1.0 layout) must be the same recipe: equal from
# the first definition on, differing only in their header and imports. Both must parse as Python,
# and both repositories must declare the namespace bmtrain. The recipe must say where its sources
# come from (homepage, git), pin each release by tag and commit (checked against the repository
# where it has them: the tag names that commit, whose CMakeLists.txt has that version), offer
# develop, declare a license exactly when the repository has one, ask only for the compilers the
# project enables, limit BLAS to CBLAS providers and pass it to CMake, and leave Kokkos' OpenMP
# backend alone unless +openmp asks for it.
#   cmake -DSOURCE_DIR=<checkout> [-DPYTHON=<python3>] [-DGIT=<git>] -P check_spack_recipes.cmake
cmake_minimum_required(VERSION 3.25)
set(classic ${SOURCE_DIR}/spack/packages/bmtrain/package.py)
set(v2 ${SOURCE_DIR}/spack/spack_repo/bmtrain/packages/bmtrain/package.py)

function(recipe_body file out)
  file(READ ${file} text)
  string(FIND "${text}" "\ndef " at)
  if(at EQUAL -1)
    message(FATAL_ERROR "expected a top-level definition in ${file}, found none")
  endif()
  string(SUBSTRING "${text}" ${at} -1 body)
  set(${out} "${body}" PARENT_SCOPE)
endfunction()

recipe_body(${classic} classic_body)
recipe_body(${v2} v2_body)
if(NOT classic_body STREQUAL v2_body)
  message(FATAL_ERROR "expected ${classic} and ${v2} to be the same recipe below their imports, "
                      "found them different (edit one, then copy its body to the other)")
endif()

file(READ ${v2} v2_text)
foreach(import "from spack_repo.builtin.build_systems.cmake import CMakePackage"
               "from spack_repo.builtin.build_systems.cuda import CudaPackage" "from spack.package import *")
  string(FIND "${v2_text}" "${import}" at)
  if(at EQUAL -1)
    message(FATAL_ERROR "expected '${import}' in ${v2}, found none")
  endif()
endforeach()

foreach(yaml ${SOURCE_DIR}/spack/repo.yaml ${SOURCE_DIR}/spack/spack_repo/bmtrain/repo.yaml)
  file(READ ${yaml} text)
  if(NOT text MATCHES "namespace: *bmtrain")
    message(FATAL_ERROR "expected 'namespace: bmtrain' in ${yaml}, found:\n${text}")
  endif()
endforeach()

function(expect_in text what regex)
  if(NOT text MATCHES "${regex}")
    message(FATAL_ERROR "expected ${what} in ${v2}, found none")
  endif()
endfunction()
function(expect_not_in text what regex)
  if(text MATCHES "${regex}")
    message(FATAL_ERROR "expected no ${what} in ${v2}, found '${CMAKE_MATCH_0}'")
  endif()
endfunction()

expect_in("${v2_text}" "a homepage" "\n +homepage = ")
expect_in("${v2_text}" "a git repository" "\n +git = ")
expect_in("${v2_text}" "version(\"develop\", branch=\"main\")" "\n    version\\(\"develop\", branch=\"main\"\\)")
expect_not_in("${v2_text}" "dependency forcing kokkos~openmp" "depends_on\\(\"kokkos[^\"]*~openmp")
expect_in("${v2_text}" "a requirement limiting the BLAS provider to CBLAS ones on ~cuda"
          "requires\\([^)]*\\^\\[virtuals=blas\\][^)]*when=\"~cuda\"")
foreach(define BMT_BLAS_LIBRARIES CBLAS_INCLUDE_DIR)
  expect_in("${v2_text}" "self.define(\"${define}\", ...)" "self\\.define\\(\"${define}\"")
endforeach()

# A license exactly when the repository has one.
file(GLOB license_files ${SOURCE_DIR}/LICENSE* ${SOURCE_DIR}/COPYING*)
if(license_files)
  expect_in("${v2_text}" "a license() for ${license_files}" "\n    license\\(")
else()
  expect_not_in("${v2_text}" "license() (the repository has no LICENSE or COPYING file)" "\n    license\\([^)]*\\)")
endif()

# The compilers the project enables, no more: project(... LANGUAGES ...) in CMakeLists.txt.
file(READ ${SOURCE_DIR}/CMakeLists.txt top)
if(NOT top MATCHES "project\\(bmtrain VERSION [0-9.]+ LANGUAGES ([A-Z ]+)\\)")
  message(FATAL_ERROR "expected project(bmtrain VERSION x.y.z LANGUAGES ...) in ${SOURCE_DIR}/CMakeLists.txt, found none")
endif()
string(REPLACE " " ";" languages "${CMAKE_MATCH_1}")
foreach(pair "C|c" "CXX|cxx" "Fortran|fortran")
  string(REPLACE "|" ";" pair "${pair}")
  list(GET pair 0 language)
  list(GET pair 1 virtual)
  if(language IN_LIST languages)
    expect_in("${v2_text}" "depends_on(\"${virtual}\") for ${language}" "depends_on\\(\"${virtual}\"")
  else()
    expect_not_in("${v2_text}" "depends_on(\"${virtual}\") (the project does not enable ${language})"
                  "depends_on\\(\"${virtual}\"[^)]*\\)")
  endif()
endforeach()

# Releases: version("x.y.z", tag="vx.y.z", commit="<40 hex digits>").
string(REGEX MATCHALL "\n    version\\(\"[0-9][^\"]*\"[^\n]*" releases "${v2_text}")
if(NOT releases)
  message(FATAL_ERROR "expected a release version(\"x.y.z\", tag=\"vx.y.z\", commit=...) in ${v2}, found none")
endif()
foreach(line IN LISTS releases)
  if(NOT line MATCHES "version\\(\"([0-9]+\\.[0-9]+\\.[0-9]+)\", tag=\"([^\"]+)\", commit=\"([0-9a-f]+)\"\\)")
    message(FATAL_ERROR "expected a release as version(\"x.y.z\", tag=\"vx.y.z\", commit=\"<sha>\"), found:${line}")
  endif()
  set(release ${CMAKE_MATCH_1})
  set(tag ${CMAKE_MATCH_2})
  set(commit ${CMAKE_MATCH_3})
  if(NOT tag STREQUAL "v${release}")
    message(FATAL_ERROR "expected release ${release} to be tag v${release}, found tag ${tag}")
  endif()
  string(LENGTH "${commit}" n)
  if(NOT n EQUAL 40)
    message(FATAL_ERROR "expected release ${release}'s commit as 40 hex digits, found ${commit}")
  endif()
  # Against the repository, as far as this checkout has it (a shallow clone may have neither).
  if(GIT AND EXISTS ${SOURCE_DIR}/.git)
    execute_process(COMMAND ${GIT} -C ${SOURCE_DIR} rev-parse -q --verify "refs/tags/${tag}^{commit}"
                    OUTPUT_VARIABLE tagged OUTPUT_STRIP_TRAILING_WHITESPACE RESULT_VARIABLE no_tag ERROR_QUIET)
    if(no_tag EQUAL 0 AND NOT tagged STREQUAL commit)
      message(FATAL_ERROR "expected tag ${tag} to name commit ${commit} as the recipe pins it, found ${tagged}")
    endif()
    execute_process(COMMAND ${GIT} -C ${SOURCE_DIR} show "${commit}:CMakeLists.txt"
                    OUTPUT_VARIABLE released RESULT_VARIABLE no_commit ERROR_QUIET)
    if(no_commit EQUAL 0)
      if(NOT released MATCHES "project\\(bmtrain VERSION ${release}[ )]")
        message(FATAL_ERROR "expected commit ${commit} (${tag}) to be bmtrain ${release}, found its CMakeLists.txt says otherwise")
      endif()
      message("release ${release}: commit ${commit} is bmtrain ${release}")
    else()
      message("release ${release}: commit ${commit} is not in this checkout; not compared")
    endif()
  endif()
endforeach()

if(PYTHON)
  execute_process(COMMAND ${PYTHON} -B -c
                          "import ast, sys\nfor f in sys.argv[1:]: ast.parse(open(f).read(), f)"
                          ${classic} ${v2}
                  RESULT_VARIABLE rc ERROR_VARIABLE err)
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "expected the recipes to parse as Python, found:\n${err}")
  endif()
endif()
message("the Spack recipes agree")
