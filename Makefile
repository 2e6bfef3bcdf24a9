# qkv build. `make` builds libqkv.a, libqkv.so and the qkv command;
# `make test` builds and runs the test suite; `make install PREFIX=...`.
CC      ?= cc
PREFIX  ?= /usr/local
BLAS_CFLAGS := $(shell pkg-config --cflags openblas 2>/dev/null)
BLAS_LIBS   := $(shell pkg-config --libs openblas 2>/dev/null || echo -lopenblas)
OPT     ?= -O3 -march=x86-64-v3 -mtune=native
CFLAGS  ?= $(OPT) -g
CFLAGS  += -std=c11 -Wall -Wextra -Wno-unused-parameter -fPIC -fopenmp -Iinclude -Isrc $(BLAS_CFLAGS)
LDLIBS  += $(BLAS_LIBS) -fopenmp -lm

SRC  := $(sort $(wildcard src/core/*.c src/kernels/*.c src/nn/*.c src/attention/*.c src/io/*.c))
OBJ  := $(SRC:%.c=build/%.o)
TEST_SRC := $(sort $(wildcard tests/test_*.c))
TESTS := $(TEST_SRC:tests/%.c=build/tests/%)
BENCH_SRC := $(sort $(wildcard bench/*.c))
BENCHES := $(BENCH_SRC:bench/%.c=build/bench/%)

all: build/libqkv.a build/libqkv.so build/qkv $(TESTS) $(BENCHES)

build/%.o: %.c include/qkv.h $(wildcard src/*/*.h)
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) -c $< -o $@

build/libqkv.a: $(OBJ)
	@rm -f $@
	ar rcs $@ $^

build/libqkv.so: $(OBJ)
	$(CC) -shared -o $@ $^ $(LDLIBS)

build/qkv: src/cli/main.c build/libqkv.a
	$(CC) $(CFLAGS) $< -o $@ build/libqkv.a $(LDLIBS)

build/tests/%: tests/%.c tests/harness.h build/libqkv.a
	@mkdir -p build/tests
	$(CC) $(CFLAGS) $< -o $@ build/libqkv.a $(LDLIBS)

build/bench/%: bench/%.c build/libqkv.a
	@mkdir -p build/bench
	$(CC) $(CFLAGS) $< -o $@ build/libqkv.a $(LDLIBS)

test: all
	tests/run_all.sh

demo: build/qkv
	build/qkv demo

qkv.pc: qkv.pc.in
	sed -e 's|@PREFIX@|$(PREFIX)|' -e 's|@BLAS_LIBS@|$(BLAS_LIBS)|' $< > $@

install: build/libqkv.a build/libqkv.so build/qkv qkv.pc
	install -d $(DESTDIR)$(PREFIX)/lib/pkgconfig $(DESTDIR)$(PREFIX)/include $(DESTDIR)$(PREFIX)/bin
	install -m 644 build/libqkv.a build/libqkv.so $(DESTDIR)$(PREFIX)/lib/
	install -m 644 include/qkv.h $(DESTDIR)$(PREFIX)/include/
	install -m 644 qkv.pc $(DESTDIR)$(PREFIX)/lib/pkgconfig/
	install -m 755 build/qkv $(DESTDIR)$(PREFIX)/bin/

# libFuzzer target for the safetensors reader; needs clang, and is not part
# of `all` or `test`. Run: build/fuzz/fuzz_safetensors -max_total_time=60 DIR
FUZZ_CC ?= clang
FUZZ_SRC := tests/fuzz/fuzz_safetensors.c src/io/json.c src/io/safetensors.c src/core/error.c

fuzz: build/fuzz/fuzz_safetensors

build/fuzz/fuzz_safetensors: $(FUZZ_SRC) include/qkv.h $(wildcard src/*/*.h)
	@mkdir -p build/fuzz
	$(FUZZ_CC) -std=c11 -g -O1 -fsanitize=fuzzer,address,undefined -Iinclude -Isrc $(FUZZ_SRC) -o $@

clean:
	rm -rf build qkv.pc

.PHONY: all test demo install clean fuzz
.SECONDARY:
