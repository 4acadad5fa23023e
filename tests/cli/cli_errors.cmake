# The vt CLI contract: JSON output for scripts, logits file, and clear non-zero exits on bad input.
# Run by CTest as: cmake -DVT=<vt binary> -DSOURCE=<repo> -P cli_errors.cmake
set(GOLDEN ${SOURCE}/tests/golden/qwen3_5_dense)
set(SCRATCH ${CMAKE_CURRENT_BINARY_DIR}/vt_cli_test_scratch)
file(MAKE_DIRECTORY ${SCRATCH})

function(expect_failure description fragment)
  execute_process(COMMAND ${VT} ${ARGN} RESULT_VARIABLE code OUTPUT_VARIABLE out ERROR_VARIABLE err)
  if(code EQUAL 0)
    message(FATAL_ERROR "${description}: vt exited 0\n${out}${err}")
  endif()
  string(FIND "${out}${err}" "${fragment}" found)
  if(found EQUAL -1)
    message(FATAL_ERROR "${description}: message lacks '${fragment}':\n${out}${err}")
  endif()
  if(code GREATER 2)
    message(FATAL_ERROR "${description}: vt crashed (exit ${code})\n${err}")
  endif()
endfunction()

# JSON contract: greedy ids equal the golden reference's, and the logits file holds vocab floats.
file(READ ${GOLDEN}/reference.json reference)
string(JSON prompt_length LENGTH "${reference}" prompts 0 ids)
set(ids "")
math(EXPR last "${prompt_length} - 1")
foreach(i RANGE ${last})
  string(JSON id GET "${reference}" prompts 0 ids ${i})
  list(APPEND ids ${id})
endforeach()
list(JOIN ids "," prompt_ids)
execute_process(COMMAND ${VT} generate --model ${GOLDEN} --prompt-ids ${prompt_ids} --max-new-tokens 24
                        --temperature 0 --json --logits-out ${SCRATCH}/logits.f32
                RESULT_VARIABLE code OUTPUT_VARIABLE out ERROR_VARIABLE err)
if(NOT code EQUAL 0)
  message(FATAL_ERROR "vt generate failed (${code}): ${err}")
endif()
string(JSON output_length LENGTH "${out}" output_ids)
string(JSON greedy_length LENGTH "${reference}" prompts 0 greedy_ids)
if(NOT output_length EQUAL greedy_length)
  message(FATAL_ERROR "vt generate --json gave ${output_length} ids, expected ${greedy_length}: ${out}")
endif()
math(EXPR last "${greedy_length} - 1")
foreach(i RANGE ${last})
  string(JSON got GET "${out}" output_ids ${i})
  string(JSON want GET "${reference}" prompts 0 greedy_ids ${i})
  if(NOT got EQUAL want)
    message(FATAL_ERROR "output_ids[${i}] = ${got}, golden ${want}: ${out}")
  endif()
endforeach()
file(SIZE ${SCRATCH}/logits.f32 logits_bytes)
if(NOT logits_bytes EQUAL 1280)  # 320 float32 values
  message(FATAL_ERROR "--logits-out wrote ${logits_bytes} bytes, expected 1280")
endif()

expect_failure("missing model folder" "no config.json" generate --model ${SCRATCH}/absent --prompt-ids 1)
expect_failure("token id outside the vocabulary" "outside the vocabulary" generate --model ${GOLDEN} --prompt-ids 1,999)
expect_failure("non-numeric id" "not an integer" generate --model ${GOLDEN} --prompt-ids 1,x)
expect_failure("negative temperature" "temperature" generate --model ${GOLDEN} --prompt-ids 1 --temperature -1)
expect_failure("too many tokens" "exceeds" generate --model ${GOLDEN} --prompt-ids 1 --max-new-tokens 100000)
expect_failure("missing subcommand" "subcommand")
# vt serve's speculative options are checked before anything loads or binds.
expect_failure("serve: a drafter the server lacks" "the server drafts with ngram" serve --model ${GOLDEN}
               --speculative draft)
expect_failure("serve: mtp without an MTP head" "has no MTP head (no mtp.* weights" serve --model ${GOLDEN}
               --speculative mtp)
expect_failure("serve: mtp on the GPU without an MTP head" "has no MTP head (no mtp.* weights" serve
               --model ${GOLDEN} --device cuda --speculative mtp)
expect_failure("serve: mtp on a synthetic model" "--synthetic models have none" serve --synthetic qwen3.5-27b
               --tokenizer ${GOLDEN} --speculative mtp)
expect_failure("serve: mtp with tensor parallelism" "runs on one GPU (--tensor-parallel 1)" serve --model ${GOLDEN}
               --device cuda --tensor-parallel 2 --speculative mtp)
expect_failure("serve: --num-draft alone" "go with --speculative" serve --model ${GOLDEN} --num-draft 4)
expect_failure("serve: --adaptive-draft alone" "go with --speculative" serve --model ${GOLDEN} --adaptive-draft)
expect_failure("serve: --num-draft 0" "--num-draft" serve --model ${GOLDEN} --speculative ngram --num-draft 0)
expect_failure("serve: --num-draft not a number" "--num-draft" serve --model ${GOLDEN} --speculative ngram
               --num-draft x)
file(WRITE ${SCRATCH}/config.json "{\"architectures\": [\"LlamaForCausalLM\"]}")
expect_failure("unknown architecture" "unknown architecture 'LlamaForCausalLM'" inspect --model ${SCRATCH})
file(REMOVE_RECURSE ${SCRATCH})
message(STATUS "cli: all checks passed")
