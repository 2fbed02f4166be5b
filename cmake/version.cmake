# Writes generated/fca/version.h with the current git commit (suffix -dirty when tracked files have
# uncommitted changes). Runs at every build, so the commit recorded in provenance is never stale;
# configure_file leaves the header untouched (no rebuild) when nothing changed.
execute_process(COMMAND git rev-parse HEAD WORKING_DIRECTORY ${SOURCE_DIR}
                OUTPUT_VARIABLE FCA_GIT_COMMIT OUTPUT_STRIP_TRAILING_WHITESPACE ERROR_QUIET)
execute_process(COMMAND git status --porcelain --untracked-files=no WORKING_DIRECTORY ${SOURCE_DIR}
                OUTPUT_VARIABLE FCA_GIT_DIRTY OUTPUT_STRIP_TRAILING_WHITESPACE ERROR_QUIET)
if(NOT FCA_GIT_COMMIT)
  set(FCA_GIT_COMMIT "unknown")
elseif(FCA_GIT_DIRTY)
  set(FCA_GIT_COMMIT "${FCA_GIT_COMMIT}-dirty")
endif()
set(PROJECT_VERSION ${VERSION})
configure_file(${SOURCE_DIR}/src/core/version.h.in ${OUTPUT} @ONLY)
