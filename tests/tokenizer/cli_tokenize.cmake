# The `vt tokenize` / `vt detokenize` contract on the committed Llama-style tokenizer (ids from HF
# tokenizers 0.23.3), and clear non-zero exits on bad input.
# Run by CTest as: cmake -DVT=<vt binary> -DSOURCE=<repo> -P cli_tokenize.cmake
set(TOKENIZER ${SOURCE}/tests/tokenizer/data/llama_style.json)

function(expect_output expected)
  execute_process(COMMAND ${VT} ${ARGN} RESULT_VARIABLE code OUTPUT_VARIABLE out ERROR_VARIABLE err)
  if(NOT code EQUAL 0 OR NOT out STREQUAL expected)
    message(FATAL_ERROR "vt ${ARGN}: exit ${code}, printed '${out}' (expected '${expected}')\n${err}")
  endif()
endfunction()

function(expect_failure fragment)
  execute_process(COMMAND ${VT} ${ARGN} RESULT_VARIABLE code OUTPUT_VARIABLE out ERROR_VARIABLE err)
  string(FIND "${out}${err}" "${fragment}" found)
  if(code EQUAL 0 OR code GREATER 2 OR found EQUAL -1)
    message(FATAL_ERROR "vt ${ARGN}: exit ${code}, expected a failure mentioning '${fragment}':\n${out}${err}")
  endif()
endfunction()

expect_output("1,272,277\n" tokenize --tokenizer ${TOKENIZER} --text "hello world")
expect_output("{\"count\":3,\"ids\":[1,272,277]}\n" tokenize --tokenizer ${TOKENIZER} --text "hello world" --json)
file(WRITE ${CMAKE_CURRENT_BINARY_DIR}/vt_cli_tokenize.txt "hello</s>world")
expect_output("1,272,2,277\n" tokenize --tokenizer ${TOKENIZER} --file ${CMAKE_CURRENT_BINARY_DIR}/vt_cli_tokenize.txt)
expect_output("<s> hello world" detokenize --tokenizer ${TOKENIZER} --ids 1,272,277)
expect_output("hello world" detokenize --tokenizer ${TOKENIZER} --ids 1,272,277 --skip-special-tokens)
expect_output("{\"text\":\"日\"}\n" detokenize --tokenizer ${TOKENIZER} --ids 233,154,168 --json)

expect_failure("exactly one of --text and --file" tokenize --tokenizer ${TOKENIZER})
expect_failure("excludes" tokenize --tokenizer ${TOKENIZER} --text a --file b)
expect_failure("cannot open" tokenize --tokenizer ${TOKENIZER} --file ${SOURCE}/no/such/file)
expect_failure("not found" tokenize --tokenizer ${SOURCE}/no/such/folder --text a)
expect_failure("not a token id" detokenize --tokenizer ${TOKENIZER} --ids 1,99999)
expect_failure("not an integer" detokenize --tokenizer ${TOKENIZER} --ids 1,x)
expect_failure("not valid JSON" tokenize --tokenizer ${SOURCE}/tests/tokenizer/data/edge_cases.txt --text a)
