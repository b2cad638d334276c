# The layer check refuses an upward include: two modules in a scratch directory, the lower one
# including the higher one's header. Run as `cmake -P`; fails (as the test expects) when the
# check does its job, passes when it wrongly accepts the circle.
set(dir ${CMAKE_CURRENT_BINARY_DIR}/layers-scratch)
file(REMOVE_RECURSE ${dir})
file(WRITE ${dir}/low.h "#include \"high.h\"\n")
file(WRITE ${dir}/high.h "#include \"low.h\"\n")
file(WRITE ${dir}/high_part.c "#include \"high.h\"\n#include \"low.h\"\n")
include(${CMAKE_CURRENT_LIST_DIR}/../cmake/layers.cmake)
botgate_check_layers(${dir} "low|high")
