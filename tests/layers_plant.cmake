# The layer check on a copy of the product's folders with one fault planted (PLANT, below): run
# as `cmake -DSRC=<source root> -DSCRATCH=<dir> -DPLANT=<fault> -P`. It fails when the check
# finds the fault (the ctests expect that), and passes with PLANT=none: the copy itself is clean,
# so each refusal is the planted fault's.
include(${CMAKE_CURRENT_LIST_DIR}/../cmake/layers.cmake)
file(REMOVE_RECURSE ${SCRATCH})
string(REGEX REPLACE "[| ]+" ";" folders "${BOTGATE_FOLDER_LAYERS}")
foreach(folder IN LISTS folders)
  if(IS_DIRECTORY ${SRC}/${folder})
    file(COPY ${SRC}/${folder} DESTINATION ${SCRATCH} FILES_MATCHING PATTERN "*.[ch]")
  endif()
endforeach()

if(PLANT STREQUAL "net_includes_gateway") # net/ is below gateway/
  file(APPEND ${SCRATCH}/net/net.c "#include \"../gateway/deliver.h\"\n")
elseif(PLANT STREQUAL "net_includes_store") # net/ and store/ are wings of one layer
  file(APPEND ${SCRATCH}/net/netpool.c "#include \"../store/store.h\"\n")
elseif(PLANT STREQUAL "core_includes_net") # core/ is below everything
  file(APPEND ${SCRATCH}/core/error.c "#include \"../net/net.h\"\n")
elseif(PLANT STREQUAL "core_includes_script") # the node engine runs scripts through nodecode.h
  file(APPEND ${SCRATCH}/core/node.c "#include \"../script/script.h\"\n")
elseif(PLANT STREQUAL "json_includes_core") # the JSON engines are below the domain
  file(APPEND ${SCRATCH}/json/jsonw.c "#include \"../core/error.h\"\n")
elseif(PLANT STREQUAL "net_module_upward") # h1conn is below the client that drives it
  file(APPEND ${SCRATCH}/net/h1conn.h "#include \"net.h\"\n")
elseif(PLANT STREQUAL "core_circle") # idem.h includes auth.h already
  file(APPEND ${SCRATCH}/core/auth.h "#include \"idem.h\"\n")
elseif(PLANT STREQUAL "module_mutual_include") # two headers of one module
  file(WRITE ${SCRATCH}/net/netpool_side.h "#include \"netpool.h\"\n")
  file(APPEND ${SCRATCH}/net/netpool.h "#include \"netpool_side.h\"\n")
elseif(PLANT STREQUAL "module_mutual_call") # two sources of one module
  file(WRITE ${SCRATCH}/net/netpool_side.c
       "#include \"netpool.h\"\nvoid netpool_side(void)\n{\n    netpool_free(0);\n}\n")
  file(APPEND ${SCRATCH}/net/netpool.c
       "void netpool_side(void);\nvoid netpool_call_side(void)\n{\n    netpool_side();\n}\n")
elseif(NOT PLANT STREQUAL "none")
  message(FATAL_ERROR "layers_plant.cmake: unknown PLANT '${PLANT}'")
endif()
botgate_check_tree(${SCRATCH})
