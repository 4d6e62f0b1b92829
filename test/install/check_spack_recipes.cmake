# The two Spack recipes (classic layout and Spack >= 1.0 layout) must be the same recipe: equal from
# the first definition on, differing only in their header and imports. Both must parse as Python,
# and both repositories must declare the namespace bmtrain.
#   cmake -DSOURCE_DIR=<checkout> [-DPYTHON=<python3>] -P check_spack_recipes.cmake
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
