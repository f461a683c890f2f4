# tools/version.cmake — writes st_version.h (the version and the git commit the binary is
# built from) at every build, replacing it only when it changed, so that `swarmtrain
# --version` names the commit without a reconfigure and nothing rebuilds for nothing.
# In: SRC (source root), OUT (header path), VERSION (the project's).
set(commit "unknown")
find_package(Git QUIET)
if(GIT_FOUND AND EXISTS "${SRC}/.git")
  execute_process(COMMAND ${GIT_EXECUTABLE} -C "${SRC}" rev-parse --short=12 HEAD
                  OUTPUT_VARIABLE c OUTPUT_STRIP_TRAILING_WHITESPACE RESULT_VARIABLE rc ERROR_QUIET)
  if(rc EQUAL 0 AND c)
    set(commit "${c}")
    execute_process(COMMAND ${GIT_EXECUTABLE} -C "${SRC}" diff --quiet HEAD --
                    RESULT_VARIABLE dirty ERROR_QUIET)
    if(NOT dirty EQUAL 0)
      set(commit "${commit}-dirty")
    endif()
  endif()
endif()
if(DEFINED ENV{SWARMTRAIN_GIT_COMMIT})
  set(commit "$ENV{SWARMTRAIN_GIT_COMMIT}") # a source tarball's builder knows it
endif()
file(WRITE "${OUT}.tmp"
     "/* st_version.h — written by tools/version.cmake at build time; do not edit. */\n"
     "#define ST_VERSION \"${VERSION}\"\n#define ST_GIT_COMMIT \"${commit}\"\n")
file(COPY_FILE "${OUT}.tmp" "${OUT}" ONLY_IF_DIFFERENT)
file(REMOVE "${OUT}.tmp")
