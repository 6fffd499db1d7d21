# tenure_ui_assets(ROOT OUTPUT): writes OUTPUT, the web UI's files
# (agent_options::ui) as byte arrays behind find_ui_asset(), while
# configuring, so that every build of the agent's sources (the library, the
# simulation's second build, the fuzz project) sees a plain source. Editing
# one of the files re-runs the configure step. ROOT is the repository root.
function(tenure_ui_assets ROOT OUTPUT)  # a function: its variables stay in it
  set(SOURCE_DIR ${ROOT}/src/agent/ui)
  set(names index.html app.js style.css)
  list(TRANSFORM names PREPEND ${SOURCE_DIR}/ OUTPUT_VARIABLE paths)
  set_property(DIRECTORY APPEND PROPERTY CMAKE_CONFIGURE_DEPENDS ${paths})  # include() adds the script
  list(JOIN names "," FILES)
  include(${ROOT}/cmake/embed_ui.cmake)
endfunction()
