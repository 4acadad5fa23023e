# `vt chat-template` end to end: renders a tokenizer folder's template with the CLI's options, and
# fails with a clear message (line/column) on bad templates and bad input.
# Run by CTest as: cmake -DVT=<vt binary> -DSOURCE=<repo> -DSCRATCH=<dir> -P chat_template_cli.cmake
set(CLI_DIR ${SOURCE}/tests/jinja/cli)
file(REMOVE_RECURSE ${SCRATCH})
file(MAKE_DIRECTORY ${SCRATCH}/tokenizer)
file(READ ${CLI_DIR}/simple.jinja simple)
string(REPLACE "\\" "\\\\" escaped "${simple}")
string(REPLACE "\"" "\\\"" escaped "${escaped}")
file(WRITE ${SCRATCH}/tokenizer/tokenizer_config.json
     "{\"bos_token\": \"<s>\", \"eos_token\": {\"content\": \"</s>\"}, \"chat_template\": \"${escaped}\"}")

function(expect_output description expected)
  execute_process(COMMAND ${VT} chat-template ${ARGN} RESULT_VARIABLE code OUTPUT_VARIABLE out ERROR_VARIABLE err)
  if(NOT code EQUAL 0)
    message(FATAL_ERROR "${description}: vt exited ${code}\n${err}")
  endif()
  if(NOT out STREQUAL expected)
    message(FATAL_ERROR "${description}: got\n${out}\nexpected\n${expected}")
  endif()
endfunction()

function(expect_failure description fragment)
  execute_process(COMMAND ${VT} chat-template ${ARGN} RESULT_VARIABLE code OUTPUT_VARIABLE out ERROR_VARIABLE err)
  if(code EQUAL 0)
    message(FATAL_ERROR "${description}: vt exited 0\n${out}")
  endif()
  if(code GREATER 2)
    message(FATAL_ERROR "${description}: vt crashed (exit ${code})\n${err}")
  endif()
  string(FIND "${err}" "${fragment}" found)
  if(found EQUAL -1)
    message(FATAL_ERROR "${description}: message lacks '${fragment}':\n${err}")
  endif()
endfunction()

set(conversation "[system]You are terse.[user]Weather in Zürich?[assistant][tool]12 °C")
expect_output("plain" "<s>${conversation}"
              --tokenizer ${SCRATCH}/tokenizer --messages ${CLI_DIR}/conversation.json)
expect_output("generation prompt and thinking" "<s>${conversation}<gen>think=False"
              --tokenizer ${SCRATCH}/tokenizer --messages ${CLI_DIR}/conversation.json --add-generation-prompt
              --enable-thinking false)
expect_output("tools" "<s>${conversation}[{\"type\": \"function\", \"function\": {\"name\": \"get_weather\", \"description\": \"Current weather\", \"parameters\": {\"type\": \"object\", \"properties\": {\"city\": {\"type\": \"string\"}}}}}]"
              --tokenizer ${SCRATCH}/tokenizer --messages ${CLI_DIR}/conversation.json --tools ${CLI_DIR}/tools.json)
# chat_template.jinja beside the config wins over the config's template.
file(WRITE ${SCRATCH}/tokenizer/chat_template.jinja "from file {{ eos_token }}\n")
expect_output("chat_template.jinja" "from file </s>" --tokenizer ${SCRATCH}/tokenizer --messages ${CLI_DIR}/conversation.json)

expect_failure("unknown filter" "chat template line 4, column 16: syntax error: no filter named 'frobnicate'"
               --template ${CLI_DIR}/bad_filter.jinja --messages ${CLI_DIR}/conversation.json)
expect_failure("runtime error" "chat template line 3, column 4: can only concatenate str"
               --template ${CLI_DIR}/runtime_error.jinja --messages ${CLI_DIR}/conversation.json)
expect_failure("missing tokenizer folder" "no chat template" --tokenizer ${SCRATCH}/absent --messages ${CLI_DIR}/conversation.json)
file(WRITE ${SCRATCH}/object.json "{\"role\": \"user\", \"content\": \"hi\"}")
expect_failure("messages not a list" "expected a JSON list" --tokenizer ${SCRATCH}/tokenizer --messages ${SCRATCH}/object.json)
expect_failure("bad thinking value" "enable-thinking" --tokenizer ${SCRATCH}/tokenizer --messages ${CLI_DIR}/conversation.json
               --enable-thinking maybe)
file(WRITE ${SCRATCH}/broken.json "[{\"role\": ")
expect_failure("malformed messages JSON" "invalid JSON" --tokenizer ${SCRATCH}/tokenizer --messages ${SCRATCH}/broken.json)
# A real template, when fetched: SmolLM2's, with its bos/eos from the GGUF.
if(EXISTS ${SOURCE}/.cache/chat_templates/smollm2/tokenizer_config.json)
  expect_output("smollm2" "<|im_start|>system\nYou are terse.<|im_end|>\n<|im_start|>user\nWeather in Zürich?<|im_end|>\n<|im_start|>assistant\n<|im_end|>\n<|im_start|>tool\n12 °C<|im_end|>\n<|im_start|>assistant\n"
                --tokenizer ${SOURCE}/.cache/chat_templates/smollm2 --messages ${CLI_DIR}/conversation.json --add-generation-prompt)
endif()
file(REMOVE_RECURSE ${SCRATCH})
message(STATUS "chat-template cli: all checks passed")
