# The two Spack recipes (classic layout and Spack >= 1.0 layout) must be the same recipe: equal from
# the first definition on, differing only in their header and imports. Both must parse as Python,
# and both repositories must declare the namespace bmtrain. The recipe must say where its sources
# come from (homepage, git), offer the branch main, pin each release by tag and commit (checked
# against the repository where it has its history: the tag exists and names that commit, whose
# CMakeLists.txt has that version), declare the license of the repository's LICENSE file, ask only
# for the compilers the project enables, ask for Kokkos 4 with +cuda, limit BLAS to CBLAS providers
# and pass it to CMake, and leave Kokkos' OpenMP backend alone unless +openmp asks for it.
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
expect_in("${v2_text}" "version(\"main\", branch=\"main\")" "\n    version\\(\"main\", branch=\"main\"\\)")
expect_in("${v2_text}" "depends_on(\"kokkos@4: +cuda...\", when=\"+cuda\")"
          "\n    depends_on\\(\"kokkos@4: \\+cuda[^\"]*\", when=\"\\+cuda\"\\)")
expect_not_in("${v2_text}" "dependency forcing kokkos~openmp" "depends_on\\(\"kokkos[^\"]*~openmp")
expect_in("${v2_text}" "a requirement limiting the BLAS provider to CBLAS ones on ~cuda"
          "requires\\([^)]*\\^\\[virtuals=blas\\][^)]*when=\"~cuda\"")
foreach(define BMT_BLAS_LIBRARIES CBLAS_INCLUDE_DIR)
  expect_in("${v2_text}" "self.define(\"${define}\", ...)" "self\\.define\\(\"${define}\"")
endforeach()

# The license of the repository's LICENSE file, by its SPDX identifier.
if(NOT EXISTS ${SOURCE_DIR}/LICENSE)
  message(FATAL_ERROR "expected a LICENSE file in ${SOURCE_DIR}, found none")
endif()
file(READ ${SOURCE_DIR}/LICENSE license_text)
if(license_text MATCHES "Apache License[ \n]+Version 2\\.0")
  set(spdx "Apache-2.0")
else()
  message(FATAL_ERROR "expected ${SOURCE_DIR}/LICENSE to be the Apache License 2.0, found another text "
                      "(name its SPDX identifier here)")
endif()
expect_in("${v2_text}" "license(\"${spdx}\") for ${SOURCE_DIR}/LICENSE" "\n    license\\(\"${spdx}\"\\)")

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

# Releases (none until the repository has a tag): version("x.y.z", tag="vx.y.z", commit="<sha>").
# Where the checkout has its history (a git repository, not shallow), the tag must exist there.
set(full_history FALSE)
if(GIT AND EXISTS ${SOURCE_DIR}/.git)
  execute_process(COMMAND ${GIT} -C ${SOURCE_DIR} rev-parse --is-shallow-repository
                  OUTPUT_VARIABLE shallow OUTPUT_STRIP_TRAILING_WHITESPACE RESULT_VARIABLE git_failed ERROR_QUIET)
  if(git_failed EQUAL 0 AND shallow STREQUAL "false")
    set(full_history TRUE)
  endif()
endif()
string(REGEX MATCHALL "\n    version\\([^\n]*" versions "${v2_text}")
foreach(line IN LISTS versions)
  if(line MATCHES "version\\(\"main\", branch=\"main\"\\)")
    continue()
  endif()
  if(NOT line MATCHES "version\\(\"([0-9]+\\.[0-9]+\\.[0-9]+)\", tag=\"([^\"]+)\", commit=\"([0-9a-f]+)\"\\)")
    message(FATAL_ERROR "expected the branch main or a release as version(\"x.y.z\", tag=\"vx.y.z\", commit=\"<sha>\"), found:${line}")
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
  if(NOT full_history)
    message("release ${release}: this checkout has no full git history; tag and commit not compared")
    continue()
  endif()
  execute_process(COMMAND ${GIT} -C ${SOURCE_DIR} rev-parse -q --verify "refs/tags/${tag}^{commit}"
                  OUTPUT_VARIABLE tagged OUTPUT_STRIP_TRAILING_WHITESPACE RESULT_VARIABLE no_tag ERROR_QUIET)
  if(NOT no_tag EQUAL 0)
    message(FATAL_ERROR "expected tag ${tag} in the repository for release ${release}, found none "
                        "(spack cannot fetch it; tag the release or remove the version)")
  endif()
  if(NOT tagged STREQUAL commit)
    message(FATAL_ERROR "expected tag ${tag} to name commit ${commit} as the recipe pins it, found ${tagged}")
  endif()
  execute_process(COMMAND ${GIT} -C ${SOURCE_DIR} show "${commit}:CMakeLists.txt"
                  OUTPUT_VARIABLE released ERROR_QUIET)
  if(NOT released MATCHES "project\\(bmtrain VERSION ${release}[ )]")
    message(FATAL_ERROR "expected commit ${commit} (${tag}) to be bmtrain ${release}, found its CMakeLists.txt says otherwise")
  endif()
  message("release ${release}: tag ${tag} names commit ${commit}, bmtrain ${release}")
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
