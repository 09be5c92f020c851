# The default build promises every part the README describes: the library with OTLP over HTTP and gRPC, the
# Prometheus endpoint, pretrain_gpt, and tests against real peers. A part whose dependency is missing stops the
# configuration, naming the Debian packages that bring it and the option that leaves the part out. Never a status
# line and a quietly smaller build: a green test run must mean that every promised part was built and tested.

# lens_require(<variable> <what is missing> <Debian packages> <option>): stops unless <variable> is true.
function(lens_require found_variable what packages option)
  if(NOT ${found_variable})
    message(FATAL_ERROR "lens: ${what}, and it was not found.\n"
      "  install it:          apt-get install --no-install-recommends ${packages}\n"
      "                       (./scripts/setup-deps.sh installs every package lens uses)\n"
      "  or leave it out:     -D${option}=OFF")
  endif()
endfunction()

# lens_require_options(<option> <what it runs> <needed option>...): stops when the part <option> turns on needs
# another that the configuration leaves out, naming those and the option that leaves the part out.
function(lens_require_options option what)
  set(missing)
  foreach(needed IN LISTS ARGN)
    if(NOT ${needed})
      list(APPEND missing ${needed})
    endif()
  endforeach()
  if(missing)
    list(JOIN missing ", " names)
    message(FATAL_ERROR "lens: ${what}, which needs ${names}; or -D${option}=OFF")
  endif()
endfunction()

# lens_require_peer(<path> <what it is> <option>): stops unless the test peer that setup builds or installs is there.
function(lens_require_peer path what option)
  if(NOT EXISTS ${path})
    message(FATAL_ERROR "lens: ${what} is not there (${path}).\n"
      "  make it:             ./scripts/setup-deps.sh   (builds the Go peers from tests/peers/*/go.sum and\n"
      "                       installs the PyPI peers of tests/peers/python/requirements.txt into .venv)\n"
      "  or leave it out:     -D${option}=OFF")
  endif()
endfunction()

# Writes <build>/lens_promised_labels.txt: the test labels this configuration promises, decided from the options
# alone (not from the tests that happened to be added), so that scripts/test.sh can fail when one ran no test.
function(lens_write_promised_labels)
  set(labels core concurrent)
  if(LENS_FUZZ)
    set(labels fuzz)
  endif()
  if(NOT LENS_CORE_ONLY)
    list(APPEND labels multiprocess disabled install compile_error otlp setup)
    foreach(part IN ITEMS "LENS_WITH_GRPC;grpc" "LENS_TEST_PEERS;peers" "LENS_TEST_PROMETHEUS;prometheus"
                          "LENS_TEST_COLLECTOR;collector" "LENS_TEST_JAEGER;jaeger" "LENS_TEST_MULTINODE;multinode"
                          "LENS_TEST_SCALE;scale" "LENS_TEST_DEPLOY;deploy"
                          "LENS_BUILD_BENCHMARKS;bench" "LENS_BUILD_EXAMPLES;example" "LENS_BUILD_TRAINER;trainer"
                          "LENS_BUILD_PYTHON;python" "LENS_BUILD_TOOLS;tools")
      list(GET part 0 option)
      list(GET part 1 label)
      if(${option})
        list(APPEND labels ${label})
      endif()
    endforeach()
    if(LENS_BUILD_PYTHON AND LENS_BUILD_TOOLS)  # the wheels users install, and the real NeMo Lens beside them
      list(APPEND labels wheel parity)
    endif()
    if(LENS_BUILD_TRAINER AND LENS_BUILD_TOOLS)  # stragglers named in real jobs: tests/straggler, lens_real_run_test
      list(APPEND labels straggler)
    endif()
  endif()
  list(JOIN labels "\n" text)
  file(WRITE ${PROJECT_BINARY_DIR}/lens_promised_labels.txt "${text}\n")
endfunction()
