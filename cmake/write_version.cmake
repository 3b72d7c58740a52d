# Run at build time (cmake -P): writes trident_version.hpp with the current git commit, touching the
# file only when its content changes so that nothing rebuilds needlessly.
# Inputs: SRC (source dir), OUT (header path), VERSION (project version), GIT (git executable).
set(commit "unknown")
if(GIT AND EXISTS "${SRC}/.git")
  execute_process(COMMAND "${GIT}" rev-parse --short=12 HEAD WORKING_DIRECTORY "${SRC}"
    OUTPUT_VARIABLE commit OUTPUT_STRIP_TRAILING_WHITESPACE ERROR_QUIET RESULT_VARIABLE rc)
  if(NOT rc EQUAL 0 OR NOT commit)
    set(commit "unknown")
  else()
    execute_process(COMMAND "${GIT}" status --porcelain --untracked-files=no WORKING_DIRECTORY "${SRC}"
      OUTPUT_VARIABLE dirty OUTPUT_STRIP_TRAILING_WHITESPACE ERROR_QUIET)
    if(dirty)
      set(commit "${commit}-dirty")
    endif()
  endif()
endif()
set(content "// Generated at build time by cmake/write_version.cmake: do not edit.
#pragma once
#define TRIDENT_VERSION_STRING \"${VERSION}\"
#define TRIDENT_GIT_COMMIT \"${commit}\"
")
if(EXISTS "${OUT}")
  file(READ "${OUT}" old)
endif()
if(NOT "${old}" STREQUAL "${content}")
  file(WRITE "${OUT}" "${content}")
endif()
