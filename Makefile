# kvserve: build, run and test.  See README.md.
#
#   make deps    install the Debian packages (and the PyPI test helper)
#   make all     libkvserve.a, the kvserve tool, the nginx module, CUDA
#   make run     start nginx with the module on 127.0.0.1:8080
#   make stop    stop it
#   make test    unit (plain, ASan+UBSan), GGUF interop, Test::Nginx,
#                the openai SDK against nginx
#   make unit / unit-asan / unit-tsan / interop / itest / sdk / bench /
#        fuzz / clean
#
# KVSERVE_CUDA=0 skips the CUDA sources even when nvcc is present.

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
FIXTURES     ?= $(abspath ../shared/fixtures)
PORT         ?= 8080

WARN         := -Wall -Wextra -Wpointer-arith -Wno-unused-parameter \
                -Wshadow -Wstrict-prototypes -Werror
CFLAGS       ?= -O2 -g
KVS_CFLAGS   := -std=gnu11 -fPIC $(WARN) -D_GNU_SOURCE \
                -DKVS_HAVE_CUDA=$(KVSERVE_CUDA)
ASAN_FLAGS   := -O1 -g -fsanitize=address,undefined \
                -fno-sanitize-recover=all -fno-omit-frame-pointer
TSAN_FLAGS   := -O1 -g -fsanitize=thread
LIBS         := -ljansson -lpcre2-8 -lutf8proc -lxxhash -lopenblas -lm \
                -lpthread

LIB_SRCS     := $(sort $(filter-out src/ngx/% src/cli/%, \
                  $(wildcard src/*/*.c)))
LIB_HDRS     := $(wildcard src/*/*.h)
CLI_SRCS     := $(wildcard src/cli/*.c)
NGX_SRCS     := ngx_kvserve_module.c $(wildcard src/ngx/*.c)
NGX_HDRS     := $(wildcard src/ngx/*.h)
CU_SRCS      := $(wildcard kernels/*.cu)
UNIT_SRCS    := $(wildcard t/unit/test_*.c)

LIB          := $(B)/libkvserve.a
ASAN_LIB     := $(B)/asan/libkvserve.a
TSAN_LIB     := $(B)/tsan/libkvserve.a
CLI          := $(B)/kvserve
MODULE       := $(B)/ngx_http_kvserve_module.so
DEFAULT_MODEL := $(B)/models/default.gguf
UNIT_BINS    := $(UNIT_SRCS:t/unit/%.c=$(B)/unit/%)
ASAN_BINS    := $(UNIT_SRCS:t/unit/%.c=$(B)/asan/unit/%)
# the tests that run threads: the engine's hand-over, the thread pool and
# the engine process's server loop
TSAN_BINS    := $(B)/tsan/unit/test_engine $(B)/tsan/unit/test_threads \
                $(B)/tsan/unit/test_srv
VENV         := $(B)/venv
# the venv is refreshed when the list of Python packages changes
PY_PKGS      := gguf==0.19.0 jinja2==3.1.6 tokenizers==0.23.3 \
                tiktoken==0.14.0 openai==3.57.0
PY_STAMP     := $(VENV)/.ok-$(shell echo '$(PY_PKGS)' | md5sum | cut -c1-8)

ifeq ($(KVSERVE_CUDA),1)
CUDA_LIB     := $(B)/libkvserve_cuda.a
CUDA_LINK    := -L$(CUDA_HOME)/lib64 -Wl,-rpath,$(CUDA_HOME)/lib64 \
                -lcudart -lstdc++
GENCODE      ?= -gencode arch=compute_90,code=sm_90 \
                -gencode arch=compute_90,code=compute_90
else
CUDA_LIB     :=
CUDA_LINK    :=
endif

.PHONY: all lib deps run stop test unit unit-asan unit-tsan interop itest \
        sdk bench \
        fuzz clean

all: $(LIB) $(CLI) $(MODULE) $(DEFAULT_MODEL)

lib: $(LIB) $(CUDA_LIB)

# --- library -------------------------------------------------------------

# Objects are rebuilt when the flags change (KVSERVE_CUDA=0 after 1, say).
FLAGS_STAMP  := $(B)/.flags
$(shell mkdir -p $(B); echo '$(CC) $(KVS_CFLAGS) $(CFLAGS)' \
        | cmp -s - $(FLAGS_STAMP) \
        || echo '$(CC) $(KVS_CFLAGS) $(CFLAGS)' > $(FLAGS_STAMP))

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

$(B)/tsan/obj/%.o: %.c $(LIB_HDRS) $(FLAGS_STAMP)
	@mkdir -p $(dir $@)
	$(CC) $(KVS_CFLAGS) $(TSAN_FLAGS) -c -o $@ $<

$(TSAN_LIB): $(LIB_SRCS:%.c=$(B)/tsan/obj/%.o)
	rm -f $@ && ar rcs $@ $^

$(B)/cuda/%.o: kernels/%.cu $(LIB_HDRS)
	@mkdir -p $(dir $@)
	$(NVCC) -c -O2 $(GENCODE) -Xcompiler -fPIC -o $@ $<

$(B)/libkvserve_cuda.a: $(CU_SRCS:kernels/%.cu=$(B)/cuda/%.o)
	rm -f $@ && ar rcs $@ $^

# --- command-line tool and the default model -----------------------------

$(CLI): $(CLI_SRCS:%.c=$(B)/obj/%.o) $(LIB) $(CUDA_LIB)
	$(CC) -o $@ $^ $(LIBS) $(CUDA_LINK)

$(DEFAULT_MODEL): $(CLI)
	@mkdir -p $(dir $@)
	$(CLI) gen-model --preset tiny --name kvserve-tiny --seed 1 $@

# --- nginx module --------------------------------------------------------
# nginx's own build compiles the glue (with -Werror) and links the
# libraries built above; `config` reads KVSERVE_BUILD to find them.

$(B)/nginx/Makefile: config $(FLAGS_STAMP)
	@mkdir -p $(B)/nginx
	cd $(NGINX_SRC) && . ./conf_flags && \
	KVSERVE_BUILD=$(BABS) KVSERVE_CUDA=$(KVSERVE_CUDA) \
	CUDA_HOME=$(CUDA_HOME) ./configure \
	    --with-cc-opt="-g -O2 -fPIC" --with-ld-opt="-fPIC" \
	    "$${NGX_CONF_FLAGS[@]}" \
	    --add-dynamic-module=$(CURDIR) \
	    --builddir=$(BABS)/nginx \
	    > $(BABS)/nginx/configure.log 2>&1 \
	|| { tail -30 $(BABS)/nginx/configure.log; exit 1; }

$(MODULE): $(B)/nginx/Makefile $(NGX_SRCS) $(NGX_HDRS) $(LIB_HDRS) \
           $(LIB) $(CUDA_LIB)
	rm -f $(B)/nginx/ngx_http_kvserve_module.so
	$(MAKE) -s -f $(BABS)/nginx/Makefile -C $(NGINX_SRC) modules
	cp $(B)/nginx/ngx_http_kvserve_module.so $@
	printf 'load_module %s;\nevents{}\n' "$(abspath $@)" > $(B)/load-check.conf
	$(NGINX) -g 'error_log /dev/null; pid /dev/null;' -t -q \
	    -c $(BABS)/load-check.conf

# --- tests ---------------------------------------------------------------

$(B)/unit/%: t/unit/%.c $(wildcard t/unit/kvs_test*.h) $(LIB)
	@mkdir -p $(dir $@)
	$(CC) $(KVS_CFLAGS) $(CFLAGS) -Isrc -o $@ $< $(LIB) -lcmocka $(LIBS) \
	    $(CUDA_LINK)

$(B)/asan/unit/%: t/unit/%.c $(wildcard t/unit/kvs_test*.h) $(ASAN_LIB)
	@mkdir -p $(dir $@)
	$(CC) $(KVS_CFLAGS) $(ASAN_FLAGS) -Isrc -o $@ $< $(ASAN_LIB) \
	    -lcmocka $(LIBS) $(CUDA_LINK)

$(B)/tsan/unit/%: t/unit/%.c $(wildcard t/unit/kvs_test*.h) $(TSAN_LIB)
	@mkdir -p $(dir $@)
	$(CC) $(KVS_CFLAGS) $(TSAN_FLAGS) -Isrc -o $@ $< $(TSAN_LIB) \
	    -lcmocka $(LIBS) $(CUDA_LINK)

TEST_ENV := KVS_FIXTURES=$(FIXTURES) KVS_TMP=$(BABS)/tmp \
            KVS_CLI=$(abspath $(CLI))

unit: $(UNIT_BINS) $(CLI)
	@mkdir -p $(B)/tmp
	@set -e; for t in $(UNIT_BINS); do \
	    echo "== $$t"; $(TEST_ENV) $$t; done

unit-asan: $(ASAN_BINS) $(CLI)
	@mkdir -p $(B)/tmp
	@set -e; for t in $(ASAN_BINS); do \
	    echo "== $$t (ASan+UBSan)"; \
	    ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 \
	    UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 \
	    $(TEST_ENV) $$t; done

unit-tsan: $(TSAN_BINS)
	@mkdir -p $(B)/tmp
	@set -e; for t in $(TSAN_BINS); do \
	    echo "== $$t (TSan)"; \
	    TSAN_OPTIONS=halt_on_error=1 $(TEST_ENV) $$t; done

$(B)/gguf_sample: t/unit/gguf_sample.c t/unit/kvs_sample.h $(LIB)
	$(CC) $(KVS_CFLAGS) $(CFLAGS) -Isrc -o $@ $< $(LIB) $(LIBS) $(CUDA_LINK)

interop: $(CLI) $(B)/gguf_sample $(B)/unit/test_rope $(PY_STAMP)
	@mkdir -p $(B)/tmp
	$(TEST_ENV) KVS_SAMPLE=$(BABS)/gguf_sample \
	    $(VENV)/bin/python t/unit/test_gguf_python.py
	$(TEST_ENV) $(VENV)/bin/python t/unit/test_chat_jinja.py
	$(TEST_ENV) $(VENV)/bin/python t/unit/test_rope_python.py \
	    $(B)/unit/test_rope
	$(TEST_ENV) $(VENV)/bin/python t/unit/test_logits_numpy.py

# The real Test::Nginx when installed; otherwise our compatible runner.
PROVE_INC := $(shell perl -MTest::Nginx::Socket -e1 2>/dev/null \
                     || echo -It/lib)

T ?= t/*.t

itest: $(MODULE) $(DEFAULT_MODEL)
	TEST_NGINX_BINARY=$(NGINX) \
	TEST_NGINX_LOAD_MODULES=$(abspath $(MODULE)) \
	TEST_NGINX_MODEL_DIR=$(BABS)/models \
	TEST_NGINX_SERVROOT=$(BABS)/servroot \
	prove $(PROVE_INC) $(T)

# the official openai Python SDK, unchanged, against nginx with the module
sdk: $(MODULE) $(DEFAULT_MODEL) $(PY_STAMP)
	@mkdir -p $(B)/tmp
	$(TEST_ENV) KVS_NGINX=$(NGINX) KVS_MODULE=$(abspath $(MODULE)) \
	    KVS_MODEL=$(abspath $(DEFAULT_MODEL)) \
	    $(VENV)/bin/python t/unit/test_openai_sdk.py

test: deps
	@$(MAKE) -s unit unit-asan unit-tsan interop itest sdk

BENCH_SRCS := $(wildcard t/bench/bench_*.c)
BENCH_BINS := $(BENCH_SRCS:t/bench/%.c=$(B)/%)

$(B)/bench_%: t/bench/bench_%.c $(LIB)
	$(CC) $(KVS_CFLAGS) $(CFLAGS) -Isrc -o $@ $< $(LIB) $(LIBS) $(CUDA_LINK)

bench: $(CLI) $(BENCH_BINS) $(MODULE) $(PY_STAMP)
	@mkdir -p $(B)/tmp
	@set -e; for b in t/bench/*.sh; do echo "== $$b"; \
	    $(TEST_ENV) KVS_BENCH_DIR=$(BABS) KVS_BENCH_GGUF=$(BABS)/bench_gguf \
	    KVS_MODULE=$(abspath $(MODULE)) NGINX=$(NGINX) \
	    KVS_PYTHON=$(abspath $(VENV))/bin/python bash $$b; done

# libFuzzer targets (clang): the GGUF reader and vocabulary loader, and
# the tokenizer on the fixture vocabularies; FUZZ_TIME seconds each.
FUZZ_TIME ?= 60
FUZZ_VOCABS := $(subst $(eval) ,:,$(wildcard \
                 $(FIXTURES)/vocab/ggml-vocab-llama-spm.gguf \
                 $(FIXTURES)/vocab/ggml-vocab-gpt-2.gguf \
                 $(FIXTURES)/vocab/ggml-vocab-falcon.gguf \
                 $(FIXTURES)/vocab/ggml-vocab-deepseek-coder.gguf \
                 $(FIXTURES)/vocab/ggml-vocab-bert-bge.gguf))
FUZZ_SRCS := $(filter src/model/% src/base/% src/tokenizer/%, $(LIB_SRCS))

# the OpenAI request parser, with the sampler's range check and the chat
# renderer that its invariants call
FUZZ_REQ_SRCS := $(FUZZ_SRCS) $(wildcard src/api/kvs_api_req*.c) \
                 src/api/kvs_api_models.c src/engine/kvs_sample.c

fuzz: $(B)/fuzz/fuzz_gguf $(B)/fuzz/fuzz_tok $(B)/fuzz/fuzz_api_req \
      $(B)/fuzz/fuzz_wire $(B)/gguf_sample $(DEFAULT_MODEL)
	@mkdir -p $(B)/fuzz/corpus $(B)/fuzz/seed $(B)/fuzz/tok-corpus \
	    $(B)/fuzz/req-corpus
	$(B)/gguf_sample $(B)/fuzz/seed/sample.gguf 3 32
	cp -f $(DEFAULT_MODEL) $(wildcard $(FIXTURES)/models/*.gguf) \
	    $(B)/fuzz/seed/ 2>/dev/null || true
	$(B)/fuzz/fuzz_gguf -max_total_time=$(FUZZ_TIME) -max_len=65536 \
	    $(B)/fuzz/corpus $(B)/fuzz/seed
	KVS_FUZZ_VOCABS=$(if $(FUZZ_VOCABS),$(FUZZ_VOCABS),$(abspath \
	    $(DEFAULT_MODEL))) $(B)/fuzz/fuzz_tok \
	    -max_total_time=$(FUZZ_TIME) -max_len=4096 $(B)/fuzz/tok-corpus
	$(B)/fuzz/fuzz_api_req -max_total_time=$(FUZZ_TIME) -max_len=8192 \
	    -dict=t/fuzz/api_req.dict $(B)/fuzz/req-corpus t/fuzz/api_req
	@mkdir -p $(B)/fuzz/wire-corpus
	$(B)/fuzz/fuzz_wire -max_total_time=$(FUZZ_TIME) -max_len=65536 \
	    $(B)/fuzz/wire-corpus t/fuzz/wire

$(B)/fuzz/fuzz_%: t/fuzz/fuzz_%.c $(FUZZ_SRCS) $(LIB_HDRS)
	@mkdir -p $(dir $@)
	clang -g -O1 -fsanitize=fuzzer,address,undefined -D_GNU_SOURCE \
	    -DKVS_HAVE_CUDA=0 -Isrc -o $@ $< $(FUZZ_SRCS) $(LIBS)

# the engine process's protocol: src/wire calls only src/base
FUZZ_WIRE_SRCS := $(filter src/base/%, $(LIB_SRCS)) $(wildcard src/wire/*.c)

$(B)/fuzz/fuzz_wire: t/fuzz/fuzz_wire.c $(FUZZ_WIRE_SRCS) $(LIB_HDRS)
	@mkdir -p $(dir $@)
	clang -g -O1 -fsanitize=fuzzer,address,undefined -D_GNU_SOURCE \
	    -DKVS_HAVE_CUDA=0 -Isrc -o $@ $< $(FUZZ_WIRE_SRCS) $(LIBS)

$(B)/fuzz/fuzz_api_req: t/fuzz/fuzz_api_req.c $(FUZZ_REQ_SRCS) $(LIB_HDRS)
	@mkdir -p $(dir $@)
	clang -g -O1 -fsanitize=fuzzer,address,undefined -D_GNU_SOURCE \
	    -DKVS_HAVE_CUDA=0 -Isrc -o $@ $< $(FUZZ_REQ_SRCS) $(LIBS)

# --- dependencies --------------------------------------------------------

DEB_PKGS := gcc make perl curl pkg-config python3 python3-venv \
            nginx nginx-dev libjansson-dev libcmocka-dev libhiredis-dev \
            libpcre2-dev libutf8proc-dev libopenblas-dev libxxhash-dev \
            redis-server \
            libtest-base-perl libtext-diff-perl libwww-perl \
            libhttp-message-perl liburi-perl liblist-moreutils-perl \
            libtest-longstring-perl libipc-run-perl clang

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
	$(VENV)/bin/pip install -q $(PY_PKGS)
	rm -f $(VENV)/.ok*
	touch $@

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
