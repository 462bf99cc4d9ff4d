# kvserve: build, run and test.  See README.md.
#
#   make deps    install the Debian packages (and the PyPI test helper)
#   make all     libkvserve.a, the kvserve tool, the nginx module and,
#                with nvcc, the CUDA backend's libkvserve_cuda.so
#   make run     start nginx with the module on 127.0.0.1:8080, serving
#                the trained default model conf/models/kvserve-stories.gguf
#   make stop    stop it
#   make test    the layer check, unit (plain, ASan+UBSan with gcc and
#                with clang, TSan), GGUF interop, Test::Nginx, the openai
#                SDK against nginx; everything built first (test-build,
#                JOBS jobs)
#   make fixtures  fetch the test data named in t/fixtures.manifest into
#                t/fixtures (or FIXTURES=DIR), checking each sha256
#   make install / uninstall  the module, the CUDA backend, the CLI, its
#                manual, the docs and example configurations, under
#                DESTDIR and PREFIX (built in a tree of their own,
#                INSTALL_B, with the installed paths compiled in)
#   make deb     build/libnginx-mod-http-kvserve_<version>_<arch>.deb
#                (conf/deb/, docs/deployment.md); deb-test installs it
#                and serves through Debian's nginx (t/deb_test.sh)
#   make layers / unit / unit-asan / unit-asan-clang / unit-asan-pair /
#        unit-tsan / interop / itest / sdk / bench / test-build /
#        fixtures-test / fuzz / cuda-check / gpu-check / clean
#   make model   retrain the committed default model from its seed
#                (t/train/, docs/models.md; 9-14 minutes on one core)
#
# KVSERVE_CUDA=0 skips the CUDA sources even when nvcc is present.  The
# CUDA backend is a shared object of its own (kernels/*.cu and
# src/backend/cuda/*.c but the plan, linked with cudart and cuBLAS, never
# -lcuda)
# that the engine process dlopens only when it selects CUDA; neither the
# CLI nor the nginx module links any CUDA library.

SHELL        := /bin/bash
.DEFAULT_GOAL := all

B            ?= build
BABS         := $(abspath $(B))
CC           ?= cc
NGINX        ?= /usr/sbin/nginx
NGINX_SRC    ?= /usr/share/nginx/src
CUDA_HOME    ?= /usr/local/cuda
NVCC         ?= $(CUDA_HOME)/bin/nvcc
KVSERVE_CUDA ?= $(if $(wildcard $(NVCC)),1,0)
# test data (README.md, "Test data (fixtures)"): t/fixtures once `make
# fixtures` has filled it, else a copy beside the checkout
FX_HERE      := $(wildcard t/fixtures)
FIXTURES     ?= $(abspath $(if $(FX_HERE),t/fixtures,../shared/fixtures))
PORT         ?= 8080
VERSION      ?= 0.1.0
# the CUDA backend's path compiled into libkvserve.a (the engine dlopens
# it), and kvserve_engine_dir's default compiled into the module (empty:
# the module's own, kvserve_temp under nginx's prefix); install and deb
# set both to where they put things
KVS_CUDA_SO_PATH ?= $(BABS)/libkvserve_cuda.so
KVS_ENGINE_DIR ?=
# nginx's compiler and linker options for the module; the CUDA objects'
# search path for cudart and cuBLAS (the package relies on ld.so.conf)
NGX_CC_OPT   ?= -g -O2 -fPIC
NGX_LD_OPT   ?= -fPIC
CUDA_RPATH   ?= -Wl,-rpath,$(CUDA_HOME)/lib64

WARN         := -Wall -Wextra -Wpointer-arith -Wno-unused-parameter \
                -Wshadow -Wstrict-prototypes -Werror
CFLAGS       ?= -O2 -g
KVS_CFLAGS   := -std=gnu11 -fPIC $(WARN) -D_GNU_SOURCE -Isrc \
                -DKVS_HAVE_CUDA=$(KVSERVE_CUDA) \
                -DKVS_CUDA_SO=\"$(KVS_CUDA_SO_PATH)\"
# the sanitizer builds keep line tables only (-g1: reports name file and
# line; a third less compile time than -g for the three builds)
ASAN_FLAGS   := -O1 -g1 -fsanitize=address,undefined \
                -fno-sanitize-recover=all -fno-omit-frame-pointer
TSAN_FLAGS   := -O1 -g1 -fsanitize=thread
LIBS         := -ljansson -lpcre2-8 -lutf8proc -lxxhash -lopenblas -lm \
                -lpthread

# the CUDA backend's plans (src/backend/cuda/kvs_cuda_plan.c,
# kvs_cuda_lora_plan.c and the block copy's kvs_cuda_bcopy.c) are plain C
# and part of the library; the rest of src/backend/cuda/ needs the CUDA
# headers and goes into libkvserve_cuda.so (below)
CUDA_PLAN_SRCS := src/backend/cuda/kvs_cuda_plan.c \
                  src/backend/cuda/kvs_cuda_lora_plan.c \
                  src/backend/cuda/kvs_cuda_bcopy.c
LIB_SRCS     := $(sort $(filter-out src/ngx/% src/cli/%, \
                  $(wildcard src/*/*.c src/backend/cpu/*.c)) \
                  $(CUDA_PLAN_SRCS))
LIB_HDRS     := $(wildcard src/*/*.h src/backend/*/*.h)
CLI_SRCS     := $(wildcard src/cli/*.c)
NGX_SRCS     := ngx_kvserve_module.c $(wildcard src/ngx/*/*.c)
NGX_HDRS     := $(wildcard src/ngx/*/*.h)
CU_SRCS      := $(wildcard kernels/*.cu)
UNIT_SRCS    := $(wildcard t/unit/test_*.c)

LIB          := $(B)/libkvserve.a
ASAN_LIB     := $(B)/asan/libkvserve.a
TSAN_LIB     := $(B)/tsan/libkvserve.a
CLI          := $(B)/kvserve
MODULE       := $(B)/ngx_http_kvserve_module.so
DEFAULT_MODEL := $(B)/models/default.gguf
# the model `make run` serves, trained by `make model` and committed
STORIES      := conf/models/kvserve-stories.gguf
UNIT_BINS    := $(UNIT_SRCS:t/unit/%.c=$(B)/unit/%)
ASAN_BINS    := $(UNIT_SRCS:t/unit/%.c=$(B)/asan/unit/%)
# the tests that run threads: the engine's hand-over, the thread pool,
# the disk tier's writer (alone and in the engine, also behind the host
# tier, and reporting to the prefix index), the host tier's copies off
# the step (a copy thread), the engine
# process's server loop and the adapters' loader
TSAN_BINS    := $(B)/tsan/unit/test_engine $(B)/tsan/unit/test_threads \
                $(B)/tsan/unit/test_kv_tier_spill \
                $(B)/tsan/unit/test_engine_tier \
                $(B)/tsan/unit/test_engine_tier_admit \
                $(B)/tsan/unit/test_engine_tier_ix \
                $(B)/tsan/unit/test_engine_thost \
                $(B)/tsan/unit/test_engine_thost_ix \
                $(B)/tsan/unit/test_engine_hcopy \
                $(B)/tsan/unit/test_engine_dload \
                $(B)/tsan/unit/test_srv \
                $(B)/tsan/unit/test_engine_lora
VENV         := $(B)/venv
# the venv is refreshed when the list of Python packages changes
PY_PKGS      := gguf==0.19.0 jinja2==3.1.6 tokenizers==0.23.3 \
                tiktoken==0.14.0 openai==3.57.0 jsonschema==4.26.0 \
                anthropic==2.16.0
PY_STAMP     := $(VENV)/.ok-$(shell echo '$(PY_PKGS)' | md5sum | cut -c1-8)

# the CUDA backend: SASS for sm_90 plus compute_90 PTX (the driver's JIT
# fallback on newer GPUs); each object's ptxas report (-Xptxas -v: the
# registers and spills of every kernel) is kept beside it in a .ptxas
# file for `make cuda-check`
GENCODE      ?= -gencode arch=compute_90,code=sm_90 \
                -gencode arch=compute_90,code=compute_90
NVCC_FLAGS   := -O3 -std=c++17 $(GENCODE) -Isrc \
                -Xcompiler -fPIC,-Wall,-Wextra \
                -Werror all-warnings -Xptxas -v
CUDA_C_SRCS  := $(filter-out $(CUDA_PLAN_SRCS), \
                  $(wildcard src/backend/cuda/*.c))
CUDA_HDRS    := $(wildcard kernels/*.h kernels/*.cuh src/backend/cuda/*.h)
CUDA_OBJS    := $(CU_SRCS:kernels/%.cu=$(B)/cuda/%.o) \
                $(CUDA_C_SRCS:%.c=$(B)/cuda/obj/%.o)
CUDA_LINK    := -L$(CUDA_HOME)/lib64 $(CUDA_RPATH) \
                -lcublas -lcudart -lstdc++
ifeq ($(KVSERVE_CUDA),1)
CUDA_SO      := $(B)/libkvserve_cuda.so $(B)/libkvserve_cuda_probe.so
else
CUDA_SO      :=
endif

.PHONY: all lib deps run stop test test-build layers unit unit-asan \
        unit-asan-clang unit-asan-pair unit-tsan interop itest \
        sdk bench cuda-check gpu-check gpu-pack \
        fixtures fixtures-test fuzz clean model install uninstall deb \
        deb-test

all: $(LIB) $(CLI) $(MODULE) $(DEFAULT_MODEL) $(CUDA_SO)

lib: $(LIB) $(CUDA_SO)

# --- library -------------------------------------------------------------

# Objects are rebuilt when the flags change (KVSERVE_CUDA=0 after 1, say).
FLAGS_STAMP  := $(B)/.flags
# nginx's configure runs again when the module's options change.  Neither
# stamp is written by a make of install, uninstall or deb alone: they
# build in trees of their own, whose sub-makes write those trees' stamps.
NGX_STAMP    := $(B)/.ngx-flags
NGX_LINE     := $(NGX_CC_OPT) | $(NGX_LD_OPT) | $(KVS_ENGINE_DIR)
ifneq ($(filter-out install uninstall deb,$(or $(MAKECMDGOALS),all)),)
$(shell mkdir -p $(B); echo '$(CC) $(KVS_CFLAGS) $(CFLAGS)' \
        | cmp -s - $(FLAGS_STAMP) \
        || echo '$(CC) $(KVS_CFLAGS) $(CFLAGS)' > $(FLAGS_STAMP))
$(shell echo '$(NGX_LINE)' | cmp -s - $(NGX_STAMP) \
        || echo '$(NGX_LINE)' > $(NGX_STAMP))
endif

$(B)/obj/%.o: %.c $(LIB_HDRS) $(FLAGS_STAMP)
	@mkdir -p $(dir $@)
	$(CC) $(KVS_CFLAGS) $(CFLAGS) -c -o $@ $<

$(B)/asan/obj/%.o: %.c $(LIB_HDRS) $(FLAGS_STAMP)
	@mkdir -p $(dir $@)
	$(CC) $(KVS_CFLAGS) $(ASAN_FLAGS) -c -o $@ $<

$(LIB): $(LIB_SRCS:%.c=$(B)/obj/%.o)
	rm -f $@ && ar rcs $@ $^

$(ASAN_LIB): $(LIB_SRCS:%.c=$(B)/asan/obj/%.o)
	rm -f $@ && ar rcs $@ $^

# clang's UBSan at -O1 takes minutes on the SIMD kernel files (154 s of
# 187 for kvs_cpu_qkp_x86.c alone, 2026-12-03, against 33 s for its ASan):
# the clang build checks them with ASan only, gcc's with ASan and UBSan
ifeq ($(CC),clang)
$(B)/asan/obj/src/backend/cpu/%_x86.o: ASAN_FLAGS += -fno-sanitize=undefined
endif

$(B)/tsan/obj/%.o: %.c $(LIB_HDRS) $(FLAGS_STAMP)
	@mkdir -p $(dir $@)
	$(CC) $(KVS_CFLAGS) $(TSAN_FLAGS) -c -o $@ $<

$(TSAN_LIB): $(LIB_SRCS:%.c=$(B)/tsan/obj/%.o)
	rm -f $@ && ar rcs $@ $^

# --- the CUDA backend's shared objects ------------------------------------
# libkvserve_cuda.so: every kernel, the backend's host side and the
# libkvserve.a members they call (hidden, and bound to their own copies:
# the nginx module that dlopens it carries libkvserve.a too).
# libkvserve_cuda_probe.so: the probe alone, linked with cudart only, so
# that finding no device never maps cuBLAS (src/backend/kvs_backend.c).

$(B)/cuda/%.o: kernels/%.cu $(CUDA_HDRS) $(LIB_HDRS)
	@mkdir -p $(dir $@)
	$(NVCC) -c $(NVCC_FLAGS) -o $@ $< 2> $(@:.o=.ptxas) \
	|| { cat $(@:.o=.ptxas); rm -f $@; exit 1; }
	@! grep -i 'warning' $(@:.o=.ptxas) || { rm -f $@; exit 1; }

$(B)/cuda/obj/%.o: %.c $(CUDA_HDRS) $(LIB_HDRS) $(FLAGS_STAMP)
	@mkdir -p $(dir $@)
	$(CC) $(KVS_CFLAGS) $(CFLAGS) -I$(CUDA_HOME)/include -Ikernels \
	    -c -o $@ $<

$(B)/libkvserve_cuda.so: $(CUDA_OBJS) $(LIB)
	$(CC) $(LDFLAGS) -shared -o $@ $(CUDA_OBJS) $(LIB) \
	    -Wl,--no-undefined -Wl,--exclude-libs,ALL -Wl,-Bsymbolic \
	    $(CUDA_LINK) -Wl,--as-needed $(LIBS)

$(B)/libkvserve_cuda_probe.so: $(B)/cuda/kvs_cuda_probe.o
	$(CC) $(LDFLAGS) -shared -o $@ $< -Wl,--no-undefined \
	    -L$(CUDA_HOME)/lib64 $(CUDA_RPATH) -lcudart \
	    -lstdc++

# every kernel built for sm_90 without a warning, both images in the .so,
# no register spills in the attention kernels, and no CUDA library
# needed by the CLI or the module (t/cuda_check.sh)
cuda-check: $(CUDA_SO) $(CLI) $(MODULE) $(VENV)/.cuobjdump $(B)/gpu_check
	CUDA_HOME=$(CUDA_HOME) VENV=$(abspath $(VENV)) \
	    bash t/cuda_check.sh $(BABS) $(CU_SRCS)
	@# gpu_check builds here, and its harness runs on the CPU backend
	@mkdir -p $(B)/tmp
	$(TEST_ENV) $(B)/gpu_check --self-test --out $(BABS)/tmp/gpu-check

# cuobjdump: the toolkit's, else NVIDIA's wheel of it in the venv (the
# toolkit installed here ships none)
$(VENV)/.cuobjdump:
	test -x $(VENV)/bin/python || python3 -m venv $(VENV)
	test -x $(CUDA_HOME)/bin/cuobjdump \
	    || $(VENV)/bin/python -m pip install -q nvidia-cuda-cuobjdump==13.5.37
	touch $@

# --- command-line tool and the default model -----------------------------

$(CLI): $(CLI_SRCS:%.c=$(B)/obj/%.o) $(LIB)
	$(CC) $(LDFLAGS) -o $@ $^ $(LIBS)

$(DEFAULT_MODEL): $(CLI)
	@mkdir -p $(dir $@)
	$(CLI) gen-model --preset tiny --name kvserve-tiny --seed 1 $@

# --- nginx module --------------------------------------------------------
# nginx's own build compiles the glue (with -Werror) and links the
# libraries built above; `config` reads KVSERVE_BUILD to find them.

# (CFLAGS leaves configure's environment: given, it would replace nginx's
# own warning flags and -Werror; the module's options are NGX_CC_OPT)
$(B)/nginx/Makefile: config $(FLAGS_STAMP) $(NGX_STAMP)
	@mkdir -p $(B)/nginx
	cd $(NGINX_SRC) && unset CFLAGS && . ./conf_flags && \
	KVSERVE_BUILD=$(BABS) KVSERVE_CUDA=$(KVSERVE_CUDA) \
	CUDA_HOME=$(CUDA_HOME) KVSERVE_ENGINE_DIR='$(KVS_ENGINE_DIR)' \
	./configure \
	    --with-cc-opt='$(NGX_CC_OPT)' --with-ld-opt='$(NGX_LD_OPT)' \
	    "$${NGX_CONF_FLAGS[@]}" \
	    --add-dynamic-module=$(CURDIR) \
	    --builddir=$(BABS)/nginx \
	    > $(BABS)/nginx/configure.log 2>&1 \
	|| { tail -30 $(BABS)/nginx/configure.log; exit 1; }

$(MODULE): $(B)/nginx/Makefile $(NGX_SRCS) $(NGX_HDRS) $(LIB_HDRS) \
           $(LIB)
	rm -f $(B)/nginx/ngx_http_kvserve_module.so
	$(MAKE) -s -f $(BABS)/nginx/Makefile -C $(NGINX_SRC) modules
	cp $(B)/nginx/ngx_http_kvserve_module.so $@
	printf 'load_module %s;\nevents{}\n' "$(abspath $@)" > $(B)/load-check.conf
	$(NGINX) -g 'error_log /dev/null; pid /dev/null;' -t -q \
	    -c $(BABS)/load-check.conf

# --- tests ---------------------------------------------------------------

$(B)/unit/%: t/unit/%.c $(wildcard t/unit/kvs_test*.h) $(LIB)
	@mkdir -p $(dir $@)
	$(CC) $(KVS_CFLAGS) $(CFLAGS) -Isrc -o $@ $< $(LIB) -lcmocka $(LIBS)

$(B)/asan/unit/%: t/unit/%.c $(wildcard t/unit/kvs_test*.h) $(ASAN_LIB)
	@mkdir -p $(dir $@)
	$(CC) $(KVS_CFLAGS) $(ASAN_FLAGS) -Isrc -o $@ $< $(ASAN_LIB) \
	    -lcmocka $(LIBS)

$(B)/tsan/unit/%: t/unit/%.c $(wildcard t/unit/kvs_test*.h) $(TSAN_LIB)
	@mkdir -p $(dir $@)
	$(CC) $(KVS_CFLAGS) $(TSAN_FLAGS) -Isrc -o $@ $< $(TSAN_LIB) \
	    -lcmocka $(LIBS)

# a stand-in for libkvserve_cuda.so (the CPU backend with device-style
# sampling) for the engine's forward_sample path, GPU or not
$(B)/unit/libkvs_fake_cuda.so: t/unit/fake_cuda_backend.c $(LIB)
	@mkdir -p $(dir $@)
	$(CC) $(KVS_CFLAGS) $(CFLAGS) -Isrc -shared -o $@ $< $(LIB) \
	    -Wl,--exclude-libs,ALL -Wl,-Bsymbolic -Wl,--no-undefined $(LIBS)

# What the sanitizer builds' tests load and run that is not under test:
# the plain build's stand-in and CLI.  The clang build is given the gcc
# build's, so that it compiles no plain library of its own (minutes of
# CI's 30 on 2 cores).
FAKE_CUDA_SO ?= $(B)/unit/libkvs_fake_cuda.so
TEST_CLI     ?= $(CLI)
CLANG_VARS   := B=$(B)/clang CC=clang TEST_CLI=$(abspath $(CLI)) \
                FAKE_CUDA_SO=$(abspath $(B)/unit/libkvs_fake_cuda.so)

$(B)/unit/test_backend_select $(B)/asan/unit/test_backend_select: \
    $(FAKE_CUDA_SO)
$(B)/unit/test_engine_gram $(B)/asan/unit/test_engine_gram: \
    $(FAKE_CUDA_SO)

TEST_ENV := KVS_FIXTURES=$(FIXTURES) KVS_TMP=$(BABS)/tmp \
            KVS_CLI=$(abspath $(TEST_CLI))

unit: $(UNIT_BINS) $(CLI)
	@mkdir -p $(B)/tmp
	@set -e; for t in $(UNIT_BINS); do \
	    echo "== $$t"; $(TEST_ENV) $$t; done

unit-asan: $(ASAN_BINS) $(TEST_CLI)
	@mkdir -p $(B)/tmp
	@set -e; for t in $(ASAN_BINS); do \
	    echo "== $$t (ASan+UBSan)"; \
	    ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 \
	    UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 \
	    $(TEST_ENV) $$t; done

# the same again built by clang, whose UBSan checks what gcc's does not
# (an offset applied to a NULL pointer, for one), in a build of its own
# (the library and the tests; the CLI and stand-in are the gcc build's)
unit-asan-clang: $(CLI) $(B)/unit/libkvs_fake_cuda.so
	@$(MAKE) -s $(CLANG_VARS) unit-asan

unit-tsan: $(TSAN_BINS)
	@mkdir -p $(B)/tmp
	@set -e; for t in $(TSAN_BINS); do \
	    echo "== $$t (TSan)"; \
	    TSAN_OPTIONS=halt_on_error=1 $(TEST_ENV) $$t; done

$(B)/gguf_sample: t/unit/gguf_sample.c t/unit/kvs_sample.h $(LIB)
	$(CC) $(KVS_CFLAGS) $(CFLAGS) -Isrc -o $@ $< $(LIB) $(LIBS)

$(B)/quant_sample: t/unit/quant_sample.c $(LIB)
	$(CC) $(KVS_CFLAGS) $(CFLAGS) -Isrc -o $@ $< $(LIB) $(LIBS)

interop: $(CLI) $(B)/gguf_sample $(B)/quant_sample $(B)/unit/test_rope \
    $(PY_STAMP)
	@mkdir -p $(B)/tmp
	$(TEST_ENV) KVS_SAMPLE=$(BABS)/gguf_sample \
	    $(VENV)/bin/python t/unit/test_gguf_python.py
	$(TEST_ENV) $(VENV)/bin/python t/unit/test_chat_jinja.py
	$(TEST_ENV) $(VENV)/bin/python t/unit/test_jinja_templates.py
	$(TEST_ENV) KVS_QUANT_SAMPLE=$(BABS)/quant_sample \
	    $(VENV)/bin/python t/unit/test_quant_python.py
	$(TEST_ENV) $(VENV)/bin/python t/unit/test_rope_python.py \
	    $(B)/unit/test_rope
	$(TEST_ENV) $(VENV)/bin/python t/unit/test_logits_numpy.py
	$(TEST_ENV) $(VENV)/bin/python t/unit/test_lora_numpy.py
	$(TEST_ENV) OPENBLAS_NUM_THREADS=1 \
	    $(VENV)/bin/python t/train/test_llama_grad.py
	$(TEST_ENV) OPENBLAS_NUM_THREADS=1 KVS_STORIES=$(abspath $(STORIES)) \
	    $(VENV)/bin/python t/train/test_stories.py

# The real Test::Nginx when installed; otherwise our compatible runner.
PROVE_INC := $(shell perl -MTest::Nginx::Socket -e1 2>/dev/null \
                     || echo -It/lib)

T ?= t/*.t

# the probe's shared object too, so that kvserve_backend auto really asks
# cudart (t/017-backend.t)
itest: $(MODULE) $(DEFAULT_MODEL) $(filter %_probe.so,$(CUDA_SO))
	KVS_FIXTURES=$(FIXTURES) TEST_NGINX_BINARY=$(NGINX) \
	TEST_NGINX_LOAD_MODULES=$(abspath $(MODULE)) \
	TEST_NGINX_MODEL_DIR=$(BABS)/models \
	TEST_NGINX_SERVROOT=$(BABS)/servroot \
	prove --directives $(PROVE_INC) $(T)

# the official openai and anthropic Python SDKs, unchanged, against nginx
# with the module
sdk: $(MODULE) $(DEFAULT_MODEL) $(PY_STAMP) $(CLI)
	@mkdir -p $(B)/tmp
	$(TEST_ENV) KVS_NGINX=$(NGINX) KVS_MODULE=$(abspath $(MODULE)) \
	    KVS_MODEL=$(abspath $(DEFAULT_MODEL)) \
	    $(VENV)/bin/python t/unit/test_openai_sdk.py
	$(TEST_ENV) KVS_NGINX=$(NGINX) KVS_MODULE=$(abspath $(MODULE)) \
	    KVS_MODEL=$(abspath $(DEFAULT_MODEL)) \
	    $(VENV)/bin/python t/unit/test_openai_structured.py
	$(TEST_ENV) KVS_NGINX=$(NGINX) KVS_MODULE=$(abspath $(MODULE)) \
	    KVS_MODEL=$(abspath $(DEFAULT_MODEL)) \
	    $(VENV)/bin/python t/unit/test_openai_tools.py
	$(TEST_ENV) KVS_NGINX=$(NGINX) KVS_MODULE=$(abspath $(MODULE)) \
	    OPENBLAS_NUM_THREADS=1 KVS_STORIES=$(abspath $(STORIES)) \
	    $(VENV)/bin/python t/train/test_stories.py --server
	$(TEST_ENV) KVS_NGINX=$(NGINX) KVS_MODULE=$(abspath $(MODULE)) \
	    KVS_MODEL=$(abspath $(DEFAULT_MODEL)) \
	    $(VENV)/bin/python t/unit/test_anthropic_sdk.py

# the test data, from the public sources in t/fixtures.manifest, into
# t/fixtures unless FIXTURES is given (the default FIXTURES may be the
# read-only copy beside the checkout); the fetch itself is checked
# offline by fixtures-test
FX_DEFAULT    := $(filter file,$(origin FIXTURES))
FIXTURES_DEST := $(abspath $(if $(FX_DEFAULT),t/fixtures,$(FIXTURES)))
fixtures:
	FIXTURES=$(FIXTURES_DEST) \
	    $(if $(wildcard $(VENV)/bin/python),\
	        KVS_PYTHON=$(abspath $(VENV))/bin/python) \
	    bash t/fixtures.sh

fixtures-test:
	KVS_FIXTURES=$(FIXTURES) bash t/unit/test_fixtures_fetch.sh

# every #include against the layer table src/layers.txt (DESIGN's
# "dependencies point down"), and nginx headers only in the glue
layers:
	@bash t/layers.sh

# make test first builds everything its suites run, JOBS at a time (every
# CPU by default), then runs the suites one after another, but for the
# two ASan+UBSan suites (gcc's and clang's builds), which run side by side
# (unit-asan-pair)
JOBS         ?= $(shell nproc 2>/dev/null || echo 2)
CLANG_ASAN_BINS := $(UNIT_SRCS:t/unit/%.c=$(B)/clang/asan/unit/%)

# every suite's output is kept in $(B)/test.log, whose counts of passed
# and skipped tests (and the fixtures the skips wanted) end the run, with
# each step's wall-clock seconds (CI has 30 minutes on 2 cores: the
# "time" lines say where they go).  A suite that fails stops the run.
TEST_SUITES := layers fixtures-test unit unit-asan-pair unit-tsan interop \
               itest sdk $(if $(filter 1,$(KVSERVE_CUDA)),cuda-check)
test: deps
	@mkdir -p $(B)
	@t0=$$(date +%s); $(MAKE) -s -j$(JOBS) test-build; rc=$$?; \
	echo "time test-build: $$(( $$(date +%s) - t0 )) s" > $(B)/test.log; \
	cat $(B)/test.log; [ $$rc = 0 ] || exit $$rc
	@set -o pipefail; rc=0; \
	for s in $(TEST_SUITES); do \
	    t0=$$(date +%s); \
	    $(MAKE) -s $$s 2>&1 | tee -a $(B)/test.log || rc=$$?; \
	    echo "time $$s: $$(( $$(date +%s) - t0 )) s" | tee -a $(B)/test.log; \
	    [ $$rc = 0 ] || break; \
	done; \
	bash t/summary.sh $(B)/test.log; exit $$rc

test-build: $(UNIT_BINS) $(ASAN_BINS) $(TSAN_BINS) $(CLI) $(MODULE) \
    $(DEFAULT_MODEL) $(CUDA_SO) $(B)/gguf_sample $(B)/quant_sample \
    $(PY_STAMP) $(if $(filter 1,$(KVSERVE_CUDA)),$(B)/gpu_check)
	@$(MAKE) -s $(CLANG_VARS) $(CLANG_ASAN_BINS)

# The two ASan+UBSan suites at once, each into its own log, shown whole
# when both have ended: each runs one test process at a time, and their
# scratch files are apart (KVS_TMP is under each build's own folder).
unit-asan-pair:
	@$(MAKE) -s unit-asan > $(B)/unit-asan.log 2>&1 & p=$$!; \
	$(MAKE) -s unit-asan-clang > $(B)/unit-asan-clang.log 2>&1; c=$$?; \
	wait $$p; a=$$?; \
	cat $(B)/unit-asan.log $(B)/unit-asan-clang.log; \
	echo "unit-asan: exit $$a, unit-asan-clang: exit $$c"; \
	test $$a = 0 && test $$c = 0

BENCH_SRCS := $(wildcard t/bench/bench_*.c)
BENCH_BINS := $(BENCH_SRCS:t/bench/%.c=$(B)/%)

$(B)/bench_%: t/bench/bench_%.c $(LIB)
	$(CC) $(KVS_CFLAGS) $(CFLAGS) -Isrc -o $@ $< $(LIB) $(LIBS)

# the prefix index lookup against a real redis-server (hiredis' sync API;
# only this bench and the nginx module link hiredis)
$(B)/bench_route: LIBS += -lhiredis

bench: $(CLI) $(BENCH_BINS) $(MODULE) $(PY_STAMP)
	@mkdir -p $(B)/tmp
	@set -e; for b in t/bench/*.sh; do echo "== $$b"; \
	    $(TEST_ENV) KVS_BENCH_DIR=$(BABS) KVS_BENCH_GGUF=$(BABS)/bench_gguf \
	    KVS_MODULE=$(abspath $(MODULE)) NGINX=$(NGINX) \
	    KVS_PYTHON=$(abspath $(VENV))/bin/python bash $$b; done

# gpu-check (issue 9), on a CUDA device, in under 5 minutes on an H200:
# every kernel against CPU references, greedy tokens CUDA vs CPU, and
# timing on Llama-3-8B shapes; writes gpu-check.md and .tsv under $(OUT)
# (docs/cuda.md).  gpu_check links the kernels' objects to call each
# launcher and reaches the backend through kvs_backend_new (dlopen);
# without a device it prints SKIP and exits 0.
GPU_CHECK_SRCS := $(wildcard t/gpu/gpu_check*.c)
GPU_CHECK_OBJS := $(CU_SRCS:kernels/%.cu=$(B)/cuda/%.o)
OUT ?= t/gpu/out

$(B)/gpu_check: $(GPU_CHECK_SRCS) $(wildcard t/gpu/gpu_check*.h) $(LIB) \
                t/unit/kvs_test_acopy.h \
                $(GPU_CHECK_OBJS) $(CUDA_HDRS)
	$(CC) $(KVS_CFLAGS) $(CFLAGS) -Isrc -I$(CUDA_HOME)/include -Ikernels \
	    -o $@ $(GPU_CHECK_SRCS) $(LIB) $(GPU_CHECK_OBJS) $(LIBS) \
	    $(CUDA_LINK)

gpu-check: $(CUDA_SO) $(CLI) $(B)/gpu_check
	@mkdir -p $(B)/tmp
	KVS_FIXTURES=$(FIXTURES) KVS_TMP=$(BABS)/tmp KVS_BENCH_DIR=$(BABS) \
	    KVSERVE_CUDA_SO=$(BABS)/libkvserve_cuda.so OUT=$(abspath $(OUT)) \
	    KVS_GPU_CHECK=1 bash t/gpu/gpu_check.sh

# gpu-pack: gpu-check's binaries, the libraries they link that a device
# machine's CUDA image lacks, and its fixture, as one tarball for the
# device tool (t/gpu/pack.sh; t/gpu/remote.sh runs it there;
# docs/cuda.md, "On a lent device").  LLAMA_SRC=tarball adds the CPU peer.
gpu-pack: $(CUDA_SO) $(CLI) $(B)/gpu_check $(B)/unit/test_cpu_amx \
          $(B)/unit/test_cpu_amxb $(B)/bench_amx $(B)/bench_lora
	bash t/gpu/pack.sh $(B) $(FIXTURES)

# libFuzzer targets (clang): the GGUF reader and vocabulary loader, the
# tokenizer on the fixture vocabularies, OpenAI request bodies, the
# engine wire, and what the prefix index reads back from Redis;
# FUZZ_TIME seconds each.
FUZZ_TIME ?= 60
FUZZ_VOCABS := $(subst $(eval) ,:,$(wildcard \
                 $(FIXTURES)/vocab/ggml-vocab-llama-spm.gguf \
                 $(FIXTURES)/vocab/ggml-vocab-gpt-2.gguf \
                 $(FIXTURES)/vocab/ggml-vocab-falcon.gguf \
                 $(FIXTURES)/vocab/ggml-vocab-deepseek-coder.gguf \
                 $(FIXTURES)/vocab/ggml-vocab-bert-bge.gguf))
FUZZ_SRCS := $(filter src/model/% src/base/% src/tokenizer/%, $(LIB_SRCS))

# the OpenAI request parser, with the sampler's range check, the chat
# renderer that its invariants call and the schema compiler that checks
# response_format and tools
FUZZ_REQ_SRCS := $(FUZZ_SRCS) $(wildcard src/api/kvs_api_req*.c) \
                 src/api/kvs_api_models.c src/api/kvs_tool_parse.c \
                 src/api/kvs_api_tok.c \
                 src/api/kvs_tool_parse_cohere.c src/api/kvs_tool_parse_py.c \
                 src/sample/kvs_sample.c $(wildcard src/grammar/*.c)

# Each target runs for FUZZ_TIME seconds as a goal of its own, so that
# `make -j2 -Otarget fuzz` runs two at a time, each one's output whole.
FUZZ_RUNS := gguf tok api_req api_msg wire index grammar jinja guard

fuzz: $(FUZZ_RUNS:%=fuzz-run-%)

.PHONY: $(FUZZ_RUNS:%=fuzz-run-%)

fuzz-run-gguf: $(B)/fuzz/fuzz_gguf $(B)/gguf_sample $(DEFAULT_MODEL)
	@mkdir -p $(B)/fuzz/corpus $(B)/fuzz/seed
	$(B)/gguf_sample $(B)/fuzz/seed/sample.gguf 3 32
	cp -f $(DEFAULT_MODEL) $(wildcard $(FIXTURES)/models/*.gguf) \
	    $(B)/fuzz/seed/ 2>/dev/null || true
	$(B)/fuzz/fuzz_gguf -max_total_time=$(FUZZ_TIME) -max_len=65536 \
	    $(B)/fuzz/corpus $(B)/fuzz/seed

fuzz-run-tok: $(B)/fuzz/fuzz_tok $(DEFAULT_MODEL)
	@mkdir -p $(B)/fuzz/tok-corpus
	KVS_FUZZ_VOCABS=$(if $(FUZZ_VOCABS),$(FUZZ_VOCABS),$(abspath \
	    $(DEFAULT_MODEL))) $(B)/fuzz/fuzz_tok \
	    -max_total_time=$(FUZZ_TIME) -max_len=4096 $(B)/fuzz/tok-corpus

fuzz-run-api_req: $(B)/fuzz/fuzz_api_req
	@mkdir -p $(B)/fuzz/req-corpus
	$(B)/fuzz/fuzz_api_req -max_total_time=$(FUZZ_TIME) -max_len=8192 \
	    -dict=t/fuzz/api_req.dict $(B)/fuzz/req-corpus t/fuzz/api_req

fuzz-run-api_msg: $(B)/fuzz/fuzz_api_msg
	@mkdir -p $(B)/fuzz/msg-corpus
	$(B)/fuzz/fuzz_api_msg -max_total_time=$(FUZZ_TIME) -max_len=8192 \
	    -dict=t/fuzz/api_msg.dict $(B)/fuzz/msg-corpus t/fuzz/api_msg

fuzz-run-wire: $(B)/fuzz/fuzz_wire
	@mkdir -p $(B)/fuzz/wire-corpus
	$(B)/fuzz/fuzz_wire -max_total_time=$(FUZZ_TIME) -max_len=65536 \
	    $(B)/fuzz/wire-corpus t/fuzz/wire

fuzz-run-index: $(B)/fuzz/fuzz_index
	@mkdir -p $(B)/fuzz/index-corpus
	$(B)/fuzz/fuzz_index -max_total_time=$(FUZZ_TIME) -max_len=4096 \
	    $(B)/fuzz/index-corpus

fuzz-run-grammar: $(B)/fuzz/fuzz_grammar
	@mkdir -p $(B)/fuzz/grammar-corpus
	$(B)/fuzz/fuzz_grammar -max_total_time=$(FUZZ_TIME) -max_len=4096 \
	    -dict=t/fuzz/grammar.dict $(B)/fuzz/grammar-corpus t/fuzz/grammar

fuzz-run-jinja: $(B)/fuzz/fuzz_jinja
	@mkdir -p $(B)/fuzz/jinja-corpus
	$(B)/fuzz/fuzz_jinja -max_total_time=$(FUZZ_TIME) -max_len=16384 \
	    -dict=t/fuzz/jinja.dict $(B)/fuzz/jinja-corpus \
	    $(wildcard $(FIXTURES)/templates)

fuzz-run-guard: $(B)/fuzz/fuzz_guard
	@mkdir -p $(B)/fuzz/guard-corpus
	$(B)/fuzz/fuzz_guard -max_total_time=$(FUZZ_TIME) -max_len=512 \
	    $(B)/fuzz/guard-corpus

# undefined behaviour stops the fuzzer (a crash it reports and saves),
# as a memory error does
FUZZ_FLAGS := -g -O1 -fsanitize=fuzzer,address,undefined \
              -fno-sanitize-recover=undefined -D_GNU_SOURCE \
              -DKVS_HAVE_CUDA=0 -Isrc

$(B)/fuzz/fuzz_%: t/fuzz/fuzz_%.c $(FUZZ_SRCS) $(LIB_HDRS)
	@mkdir -p $(dir $@)
	clang $(FUZZ_FLAGS) -o $@ $< $(FUZZ_SRCS) $(LIBS)

# the engine process's protocol: src/wire calls only src/base
FUZZ_WIRE_SRCS := $(filter src/base/%, $(LIB_SRCS)) $(wildcard src/wire/*.c)

$(B)/fuzz/fuzz_wire: t/fuzz/fuzz_wire.c $(FUZZ_WIRE_SRCS) $(LIB_HDRS)
	@mkdir -p $(dir $@)
	clang $(FUZZ_FLAGS) -o $@ $< $(FUZZ_WIRE_SRCS) $(LIBS)

# what the prefix index reads from Redis: src/index calls only src/base
FUZZ_INDEX_SRCS := $(filter src/base/%, $(LIB_SRCS)) $(wildcard src/index/*.c)

$(B)/fuzz/fuzz_index: t/fuzz/fuzz_index.c $(FUZZ_INDEX_SRCS) $(LIB_HDRS)
	@mkdir -p $(dir $@)
	clang $(FUZZ_FLAGS) -o $@ $< $(FUZZ_INDEX_SRCS) $(LIBS)

# JSON Schema -> grammar -> matcher and mask: src/grammar calls src/base
# and src/tokenizer
# with the tool-call parser that reads a tools grammar's outputs back
FUZZ_GRAMMAR_SRCS := $(FUZZ_SRCS) $(wildcard src/grammar/*.c) \
                     src/api/kvs_tool_parse.c \
                     src/api/kvs_tool_parse_cohere.c \
                     src/api/kvs_tool_parse_py.c

$(B)/fuzz/fuzz_grammar: t/fuzz/fuzz_grammar.c $(FUZZ_GRAMMAR_SRCS) \
                        $(LIB_HDRS)
	@mkdir -p $(dir $@)
	clang $(FUZZ_FLAGS) -o $@ $< $(FUZZ_GRAMMAR_SRCS) $(LIBS)

# the guard's streaming matcher against its definition: src/guard calls
# only src/base
FUZZ_GUARD_SRCS := $(filter src/base/%, $(LIB_SRCS)) $(wildcard src/guard/*.c)

$(B)/fuzz/fuzz_guard: t/fuzz/fuzz_guard.c t/unit/kvs_guard_ref.h \
                      $(FUZZ_GUARD_SRCS) $(LIB_HDRS)
	@mkdir -p $(dir $@)
	clang $(FUZZ_FLAGS) -o $@ $< $(FUZZ_GUARD_SRCS) $(LIBS)

# Anthropic's Messages parser: the OpenAI one's sources, and the writers
FUZZ_MSG_SRCS := $(FUZZ_REQ_SRCS) $(wildcard src/api/kvs_api_msg*.c) \
                 src/api/kvs_api_resp.c \
                 src/sample/kvs_finish.c

$(B)/fuzz/fuzz_api_msg: t/fuzz/fuzz_api_msg.c $(FUZZ_MSG_SRCS) $(LIB_HDRS)
	@mkdir -p $(dir $@)
	clang $(FUZZ_FLAGS) -o $@ $< $(FUZZ_MSG_SRCS) $(LIBS)

$(B)/fuzz/fuzz_api_req: t/fuzz/fuzz_api_req.c $(FUZZ_REQ_SRCS) $(LIB_HDRS)
	@mkdir -p $(dir $@)
	clang $(FUZZ_FLAGS) -o $@ $< $(FUZZ_REQ_SRCS) $(LIBS)

# --- installing and the Debian package -----------------------------------
# `make install` builds in a tree of its own, INSTALL_B, with the paths it
# installs to compiled in (the CUDA backend's; kvserve_engine_dir's
# default when KVS_ENGINE_DIR is given), then copies under DESTDIR.  The
# module's load_module line goes to NGX_MODCONFDIR; enabling it is the
# admin's (docs/deployment.md) or the package's (postinst).

PREFIX         ?= /usr/local
BINDIR         ?= $(PREFIX)/bin
LIBDIR         ?= $(PREFIX)/lib
NGX_MODDIR     ?= $(LIBDIR)/nginx/modules
KVS_LIBDIR     ?= $(LIBDIR)/kvserve
DATADIR        ?= $(PREFIX)/share
NGX_MODCONFDIR ?= $(DATADIR)/nginx/modules-available
MANDIR         ?= $(DATADIR)/man
DOCDIR         ?= $(DATADIR)/doc/kvserve
NGX_LOAD       ?= $(NGX_MODDIR)/ngx_http_kvserve_module.so
INSTALL_B      ?= $(B)/install
INSTALL        ?= install
DOC_FILES      := $(wildcard docs/*.md docs/*.png)

.PHONY: install-build install-files

INSTALL_VARS    = B=$(INSTALL_B) \
                  KVS_CUDA_SO_PATH=$(KVS_LIBDIR)/libkvserve_cuda.so

install:
	@$(MAKE) $(INSTALL_VARS) install-build
	@$(MAKE) -s $(INSTALL_VARS) install-files

install-build: $(CLI) $(MODULE) $(CUDA_SO)

install-files:
	$(INSTALL) -d $(DESTDIR)$(BINDIR) $(DESTDIR)$(NGX_MODDIR) \
	    $(DESTDIR)$(NGX_MODCONFDIR) $(DESTDIR)$(MANDIR)/man1 \
	    $(DESTDIR)$(DOCDIR)/docs $(DESTDIR)$(DOCDIR)/examples
	$(INSTALL) -m 755 $(CLI) $(DESTDIR)$(BINDIR)/kvserve
	$(INSTALL) -m 644 $(MODULE) $(DESTDIR)$(NGX_MODDIR)/
	$(if $(CUDA_SO),$(INSTALL) -d $(DESTDIR)$(KVS_LIBDIR) && \
	    $(INSTALL) -m 644 $(CUDA_SO) $(DESTDIR)$(KVS_LIBDIR)/)
	echo 'load_module $(NGX_LOAD);' > \
	    $(DESTDIR)$(NGX_MODCONFDIR)/mod-http-kvserve.conf
	chmod 644 $(DESTDIR)$(NGX_MODCONFDIR)/mod-http-kvserve.conf
	$(INSTALL) -m 644 docs/kvserve.1 $(DESTDIR)$(MANDIR)/man1/
	$(INSTALL) -m 644 README.md $(DESTDIR)$(DOCDIR)/
	$(INSTALL) -m 644 $(DOC_FILES) $(DESTDIR)$(DOCDIR)/docs/
	$(INSTALL) -m 644 conf/kvserve-site.conf $(DESTDIR)$(DOCDIR)/examples/

uninstall:
	rm -f $(DESTDIR)$(BINDIR)/kvserve \
	    $(DESTDIR)$(NGX_MODDIR)/ngx_http_kvserve_module.so \
	    $(DESTDIR)$(KVS_LIBDIR)/libkvserve_cuda.so \
	    $(DESTDIR)$(KVS_LIBDIR)/libkvserve_cuda_probe.so \
	    $(DESTDIR)$(NGX_MODCONFDIR)/mod-http-kvserve.conf \
	    $(DESTDIR)$(MANDIR)/man1/kvserve.1 \
	    $(DESTDIR)$(DOCDIR)/README.md \
	    $(addprefix $(DESTDIR)$(DOCDIR)/,$(DOC_FILES)) \
	    $(DESTDIR)$(DOCDIR)/examples/kvserve-site.conf
	rmdir $(DESTDIR)$(DOCDIR)/docs $(DESTDIR)$(DOCDIR)/examples \
	    $(DESTDIR)$(DOCDIR) $(DESTDIR)$(KVS_LIBDIR) 2>/dev/null || true

# The package: `make install` into DEB_STAGE in Debian's layout, built
# with dpkg-buildflags' hardened flags and with no rpath to the CUDA
# toolkit (ld.so.conf finds it), then conf/deb/build-deb.sh.
DEB_PKG        := libnginx-mod-http-kvserve
DEB_REVISION   ?= 1
DEB_VERSION    := $(VERSION)-$(DEB_REVISION)
DEB_ARCH       := $(shell dpkg --print-architecture 2>/dev/null)
DEB_MULTIARCH  := $(shell dpkg-architecture -qDEB_HOST_MULTIARCH \
                    2>/dev/null)
DEB            := $(B)/$(DEB_PKG)_$(DEB_VERSION)_$(DEB_ARCH).deb
DEB_B          := $(BABS)/deb
DEB_STAGE      := $(DEB_B)/src/debian/$(DEB_PKG)
DEB_FLAGS       = $(shell DEB_BUILD_MAINT_OPTIONS=hardening=+all \
                    dpkg-buildflags --get $(1))
# the package's Maintainer: the last commit's author unless given
MAINTAINER     ?= $(shell git log -1 --format='%an <%ae>' 2>/dev/null)

# The kernels' objects depend on nothing the package's flags change
# (NVCC_FLAGS, sources, headers), so the in-tree ones are copied in with
# their times: make rebuilds only those older than their sources, and
# CI's deb-test does not run nvcc a second time (minutes on 2 cores).
deb:
	rm -rf $(DEB_STAGE)
	@mkdir -p $(DEB_B)/build/cuda
	$(if $(wildcard $(B)/cuda/*.o),cp -p $(wildcard $(B)/cuda/*.o) \
	    $(DEB_B)/build/cuda/)
	$(MAKE) install INSTALL_B=$(DEB_B)/build DESTDIR=$(DEB_STAGE) \
	    PREFIX=/usr KVS_LIBDIR=/usr/lib/$(DEB_MULTIARCH)/kvserve \
	    DOCDIR=/usr/share/doc/$(DEB_PKG) \
	    NGX_LOAD=modules/ngx_http_kvserve_module.so \
	    KVS_ENGINE_DIR=/var/lib/nginx/kvserve CUDA_RPATH= \
	    CFLAGS="$(call DEB_FLAGS,CFLAGS) $(call DEB_FLAGS,CPPFLAGS)" \
	    LDFLAGS="$(call DEB_FLAGS,LDFLAGS)" \
	    NGX_CC_OPT="$(call DEB_FLAGS,CFLAGS) -fPIC \
	        $(call DEB_FLAGS,CPPFLAGS)" \
	    NGX_LD_OPT="$(call DEB_FLAGS,LDFLAGS) -fPIC"
	MAINTAINER='$(MAINTAINER)' NGX_SRC=$(NGINX_SRC) \
	    bash conf/deb/build-deb.sh $(DEB_B)/src $(abspath $(DEB)) \
	    $(DEB_VERSION)

# install the package on this host, serve through Debian's nginx, remove
# it; leaves the host as it was (t/deb_test.sh; root, after make test)
deb-test: deb $(DEFAULT_MODEL)
	bash t/deb_test.sh $(abspath $(DEB)) $(abspath $(DEFAULT_MODEL))

# --- dependencies --------------------------------------------------------

DEB_PKGS := gcc make perl curl pkg-config python3 python3-venv \
            nginx nginx-dev libjansson-dev libcmocka-dev libhiredis-dev \
            libpcre2-dev libutf8proc-dev libopenblas-dev libxxhash-dev \
            redis-server \
            libtest-base-perl libtext-diff-perl libwww-perl \
            libhttp-message-perl liburi-perl liblist-moreutils-perl \
            libtest-longstring-perl libipc-run-perl clang lintian \
            prometheus

deps:
	@missing=""; for p in $(DEB_PKGS); do \
	    dpkg-query -W -f='$${Status}' $$p 2>/dev/null \
	        | grep -q 'install ok installed' || missing="$$missing $$p"; \
	done; \
	if [ -n "$$missing" ]; then \
	    echo "installing:$$missing"; \
	    apt-get update && DEBIAN_FRONTEND=noninteractive \
	        apt-get install -y --no-install-recommends $$missing; \
	fi
	@$(MAKE) -s $(PY_STAMP)

$(PY_STAMP):
	test -x $(VENV)/bin/python || python3 -m venv $(VENV)
	$(VENV)/bin/python -m pip install -q $(PY_PKGS)
	rm -f $(VENV)/.ok*
	touch $@

# --- the default model ---------------------------------------------------

# corpus -> tokenizer -> numpy training -> GGUF, all from the seed in
# t/train/train.py; the same bytes again on the same numpy and BLAS build
# (BLAS pinned to one thread there).  The file is committed, so neither
# `all` nor `run` depends on this.
model: $(PY_STAMP)
	@mkdir -p $(dir $(STORIES))
	$(VENV)/bin/python t/train/train.py $(STORIES)

# --- running -------------------------------------------------------------

RUN_DIR := $(B)/run

run: deps all
	@$(MAKE) -s stop
	@mkdir -p $(RUN_DIR)
	$(NGINX) -p $(CURDIR)/ -c conf/kvserve.conf -e $(RUN_DIR)/error.log
	@for i in $$(seq 100); do \
	    curl -s -o /dev/null 127.0.0.1:$(PORT)/v1/models && break; \
	    sleep 0.05; done
	@echo "kvserve is serving on http://127.0.0.1:$(PORT)/"
	@echo "  curl -s 127.0.0.1:$(PORT)/v1/models"
	@echo "  logs: $(RUN_DIR)/error.log; stop with: make stop"

stop:
	@if [ -s $(RUN_DIR)/nginx.pid ] \
	    && kill -0 $$(cat $(RUN_DIR)/nginx.pid) 2>/dev/null; then \
	    $(NGINX) -p $(CURDIR)/ -c conf/kvserve.conf \
	        -e $(RUN_DIR)/error.log -s quit; \
	    for i in $$(seq 100); do [ -e $(RUN_DIR)/nginx.pid ] || break; \
	        sleep 0.05; done; \
	fi

clean:
	rm -rf $(B) t/servroot
