# llmplan_warnings(target): warnings as errors on our own code only (not on Debian's headers,
# which come in as SYSTEM includes through their imported targets).
function(llmplan_warnings target)
  target_compile_options(${target} PRIVATE
    $<$<COMPILE_LANGUAGE:CXX>:-Wall -Wextra -Werror -Wno-error=deprecated-declarations>)
endfunction()
