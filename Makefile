# qkv build.
#   make                 libqkv.a, libqkv.so, the qkv command, tests, benchmarks (in build/)
#   make test            build and run the test suite
#   make sanitize        build into build-san/ with address and undefined-behaviour
#                        sanitizers and run the suite there
#   make install PREFIX=/usr/local
CC      ?= cc
PREFIX  ?= /usr/local
B       ?= build
# Dependencies, found through pkg-config: OpenBLAS (Debian's libopenblas-dev).
# qkv calls BLAS from several OpenMP threads at once (qkv_gemm splits large
# products), so it needs a thread-safe OpenBLAS: Debian's default (pthread)
# build, which qkv sets to one thread of its own. Not the single-threaded
# build (libopenblas-serial-dev): its packing buffers are shared between
# callers, and concurrent products came out wrong (tests/test_threads.c).
BLAS_PC   := pkg-config
ifneq ($(MAKECMDGOALS),clean)
ifeq ($(shell $(BLAS_PC) --exists openblas && echo yes),)
$(error OpenBLAS not found by pkg-config: run tools/setup.sh (Debian: apt-get install pkg-config libopenblas-dev))
endif
endif
# Image data (src/data/): gzip'd idx files through zlib (Debian's
# zlib1g-dev), PNG images through libpng (libpng-dev); both in libqkv.
# WordPiece's Unicode normalisation and categories (src/data/tokenizer_wordpiece.c)
# through utf8proc (libutf8proc-dev), in libqkv too.
ifneq ($(MAKECMDGOALS),clean)
ifeq ($(shell $(BLAS_PC) --exists zlib libpng && echo yes),)
$(error zlib or libpng not found by pkg-config: run tools/setup.sh (Debian: apt-get install zlib1g-dev libpng-dev))
endif
ifeq ($(shell $(BLAS_PC) --exists libutf8proc && echo yes),)
$(error utf8proc not found by pkg-config: run tools/setup.sh (Debian: apt-get install libutf8proc-dev))
endif
endif
BLAS_CFLAGS := $(shell $(BLAS_PC) --cflags openblas zlib libpng libutf8proc)
BLAS_LIBS   := $(shell $(BLAS_PC) --libs openblas zlib libpng libutf8proc)
# Figures (libqkv-plot, src/plot/) draw with Cairo (Debian's libcairo2-dev);
# libqkv itself does not need it.
ifneq ($(MAKECMDGOALS),clean)
ifeq ($(shell $(BLAS_PC) --exists cairo && echo yes),)
$(error Cairo not found by pkg-config: run tools/setup.sh (Debian: apt-get install libcairo2-dev))
endif
endif
PLOT_CFLAGS := $(shell $(BLAS_PC) --cflags cairo)
PLOT_LIBS   := $(shell $(BLAS_PC) --libs cairo)
# MPI (Debian's libopenmpi-dev, openmpi-bin), optional: data-parallel
# training across processes (src/dist/, docs/distributed.md). MPI=auto (the
# default) builds with it when pkg-config finds ompi-c, MPI=1 requires it,
# MPI=0 builds without. Without it qkv builds and runs as before and the MPI
# tests say that they did not run.
MPI ?= auto
ifneq ($(MAKECMDGOALS),clean)
ifeq ($(MPI),auto)
override MPI := $(if $(shell $(BLAS_PC) --exists ompi-c && echo yes),1,0)
endif
ifeq ($(MPI),1)
ifeq ($(shell $(BLAS_PC) --exists ompi-c && echo yes),)
$(error MPI=1 but pkg-config does not find ompi-c: run tools/setup.sh (Debian: apt-get install libopenmpi-dev openmpi-bin))
endif
MPI_CFLAGS := $(shell $(BLAS_PC) --cflags ompi-c) -DQKV_MPI
MPI_LIBS   := $(shell $(BLAS_PC) --libs ompi-c)
endif
endif
# oneDNN (Debian's libdnnl-dev), optional: the BF16 precision mode's
# matmuls (src/kernels/gemm_bf16.c, docs/bf16.md). Debian ships no
# pkg-config file for it, so it is found by its header. DNNL=auto (the
# default) builds with it when /usr/include/dnnl.h is there, DNNL=1
# requires it, DNNL=0 builds without (BF16 mode then rounds the inputs and
# multiplies in FP32: the same numbers, not faster).
DNNL ?= auto
DNNL_INC ?= /usr/include
ifneq ($(MAKECMDGOALS),clean)
ifeq ($(DNNL),auto)
override DNNL := $(if $(wildcard $(DNNL_INC)/dnnl.h),1,0)
endif
ifeq ($(DNNL),1)
ifeq ($(wildcard $(DNNL_INC)/dnnl.h),)
$(error DNNL=1 but $(DNNL_INC)/dnnl.h is missing: run tools/setup.sh (Debian: apt-get install libdnnl-dev))
endif
DNNL_CFLAGS := -DQKV_DNNL
DNNL_LIBS   := -ldnnl
endif
endif
# x86-64: the library is built for x86-64-v3 (AVX2, FMA) when the build
# machine runs it, for baseline x86-64 otherwise; the attention kernels come
# in AVX-512, AVX2 and portable builds and the widest the CPU runs is picked
# at run time (src/kernels/attention_flash.c).
ARCH    := $(shell uname -m)
ifeq ($(ARCH),x86_64)
HAS_V3  := $(shell grep -qw avx2 /proc/cpuinfo 2>/dev/null && grep -qw fma /proc/cpuinfo 2>/dev/null && echo yes)
OPT     ?= -O3 $(if $(HAS_V3),-march=x86-64-v3) -mtune=native
else
OPT     ?= -O3
endif
CFLAGS  ?= -g
QKV_CFLAGS := $(OPT) -std=c11 -Wall -Wextra -Wno-unused-parameter -fPIC -fopenmp -Iinclude -Isrc $(BLAS_CFLAGS)
QKV_LIBS   := $(BLAS_LIBS) $(MPI_LIBS) $(DNNL_LIBS) -fopenmp -lm
ALL_CFLAGS  = $(QKV_CFLAGS) $(CFLAGS)

# The library: every folder of src/ but the command (src/cli/), floor by floor.
LIB_DIRS := core kernels io dist nn train attention models decode data
SRC  := $(sort $(foreach d,$(LIB_DIRS),$(wildcard src/$(d)/*.c)))
OBJ  := $(SRC:%.c=$(B)/%.o)
PLOT_SRC := $(sort $(wildcard src/plot/*.c))
PLOT_OBJ := $(PLOT_SRC:%.c=$(B)/%.o)
TEST_SRC := $(sort $(wildcard tests/test_*.c))
TEST_SH := $(sort $(wildcard tests/test_*.sh))
TESTS := $(TEST_SRC:tests/%.c=$(B)/tests/%) $(TEST_SH:tests/%.sh=$(B)/tests/%)
BENCH_SRC := $(sort $(wildcard bench/*.c))
BENCHES := $(BENCH_SRC:bench/%.c=$(B)/bench/%)
HDRS := include/qkv.h $(wildcard include/qkv/*.h src/*/*.h)
VERSION := $(shell sed -n 's/^\#define QKV_VERSION "\(.*\)"/\1/p' include/qkv.h)
SO_MAJOR := $(firstword $(subst ., ,$(VERSION)))

all: $(B)/libqkv.a $(B)/libqkv.so $(B)/libqkv-plot.a $(B)/libqkv-plot.so $(B)/qkv.pc $(B)/qkv-plot.pc $(B)/qkv \
	$(B)/cmake/qkvConfig.cmake $(B)/cmake/qkvConfigVersion.cmake $(B)/man/qkv.1 $(B)/completion/qkv \
	$(TESTS) $(BENCHES)

$(B)/%.o: %.c $(HDRS)
	@mkdir -p $(dir $@)
	$(CC) $(ALL_CFLAGS) -c $< -o $@

# The SIMD kernels multiply-add in one rounding (ISO C mode turns that off).
$(B)/src/kernels/attention_avx512.o $(B)/src/kernels/attention_avx2.o $(B)/src/kernels/attention_portable.o \
$(B)/src/kernels/attention_bf16_avx512.o $(B)/src/kernels/attention_bf16_avx2.o \
$(B)/src/kernels/attention_bf16_portable.o $(B)/src/kernels/attention_bf16_amx.o: ALL_CFLAGS += -ffp-contract=fast
# The fast GELU's selects (x < 0 ? a : b) vectorise only where floating-point
# traps are not part of the semantics (qkv never enables them).
$(B)/src/nn/activation.o: ALL_CFLAGS += -fno-trapping-math
# Adam's update vectorises only where sqrtf need not set errno (qkv never
# reads it after a math function); the values are the same, IEEE sqrt and
# division being correctly rounded either way.
$(B)/src/train/optim.o: ALL_CFLAGS += -fno-math-errno -fno-trapping-math
ifeq ($(ARCH),x86_64)
$(B)/src/kernels/attention_avx512.o: ALL_CFLAGS += -mavx512f -mavx512vl -mavx512dq -mavx512bw -mfma
$(B)/src/kernels/attention_avx2.o: ALL_CFLAGS += -mavx2 -mfma
$(B)/src/kernels/attention_bf16_avx512.o: ALL_CFLAGS += -mavx512f -mavx512vl -mavx512dq -mavx512bw -mavx512bf16 -mfma
$(B)/src/kernels/attention_bf16_avx2.o: ALL_CFLAGS += -mavx2 -mfma
# AMX tiles where the compiler knows them (GCC 11, clang 12 and later);
# without, the AMX build is empty and the RNN product keeps vdpbf16ps.
AMX_FLAGS := $(shell echo 'int x;' | $(CC) -mamx-tile -mamx-bf16 -x c -c -o /dev/null - 2>/dev/null && echo -mamx-tile -mamx-bf16)
$(B)/src/kernels/attention_bf16_amx.o: ALL_CFLAGS += -mavx512f -mavx512vl -mavx512dq -mavx512bw -mavx512bf16 -mfma \
	$(AMX_FLAGS)
$(B)/src/kernels/gemm_bf16_vnni.o: ALL_CFLAGS += -mavx512f -mavx512vl -mavx512dq -mavx512bw -mavx512bf16 -mfma $(AMX_FLAGS)
$(B)/src/kernels/vmath_avx512.o: ALL_CFLAGS += -mavx512f -mavx512vl -mavx512dq -mavx512bw -mfma -mprefer-vector-width=512
# The quantized products' dot products (src/kernels/quant_dot_simd.h), per instruction set.
$(B)/src/kernels/quant_dot_avx2.o: ALL_CFLAGS += -mavx2 -mfma -mf16c
$(B)/src/kernels/quant_dot_vnni.o: ALL_CFLAGS += -mavx2 -mfma -mf16c -mavx512f -mavx512vl -mavx512bw -mavx512vnni
endif

# Only the GEMMs (FP32 and bf16) see dnnl.h; they are rebuilt when DNNL= changes.
$(B)/src/kernels/gemm_bf16.o $(B)/src/kernels/gemm.o: ALL_CFLAGS += $(DNNL_CFLAGS)
$(B)/src/kernels/gemm_bf16.o $(B)/src/kernels/gemm.o: $(B)/dnnl-$(DNNL).stamp
$(B)/dnnl-$(DNNL).stamp:
	@mkdir -p $(B)
	@rm -f $(B)/dnnl-*.stamp
	@touch $@

# bench/bf16_gemm compares the bf16 GEMM libraries: oneDNN (above) and
# libxsmm (Debian's libxsmm-dev, pkg-config libxsmm), each where present.
XSMM_OK := $(if $(filter clean,$(MAKECMDGOALS)),,$(shell PKG_CONFIG_PATH=/usr/lib/pkgconfig $(BLAS_PC) --exists libxsmm && echo yes))
$(B)/bench/bf16_gemm: ALL_CFLAGS += $(if $(filter 1,$(DNNL)),-DQKV_BENCH_DNNL) \
	$(if $(XSMM_OK),-DQKV_BENCH_XSMM $(shell PKG_CONFIG_PATH=/usr/lib/pkgconfig $(BLAS_PC) --cflags libxsmm))
$(B)/bench/bf16_gemm: EXTRA_LIBS = $(if $(XSMM_OK),$(shell PKG_CONFIG_PATH=/usr/lib/pkgconfig $(BLAS_PC) --libs libxsmm))

# Only the MPI engine sees mpi.h; it is rebuilt when MPI= changes.
$(B)/src/dist/dist_mpi.o: ALL_CFLAGS += $(MPI_CFLAGS)
$(B)/src/dist/dist_mpi.o: $(B)/mpi-$(MPI).stamp
$(B)/mpi-$(MPI).stamp:
	@mkdir -p $(B)
	@rm -f $(B)/mpi-*.stamp
	@touch $@

$(B)/libqkv.a: $(OBJ)
	@rm -f $@
	ar rcs $@ $^

# The shared libraries export only the functions include/ declares (marked
# QKV_API); everything else is built hidden (docs/core.md, "The shared
# library: what it exports"). Each has the SONAME of its major version and
# the usual links: libqkv.so -> libqkv.so.0 -> libqkv.so.0.2.0.
$(OBJ) $(PLOT_OBJ): ALL_CFLAGS += -fvisibility=hidden

$(B)/libqkv.so.$(VERSION): $(OBJ) src/libqkv.map
	$(CC) $(CFLAGS) -shared -Wl,-soname,libqkv.so.$(SO_MAJOR) -Wl,--version-script=src/libqkv.map \
		-o $@ $(OBJ) $(QKV_LIBS) $(LDFLAGS)

$(B)/%.so.$(SO_MAJOR): $(B)/%.so.$(VERSION)
	ln -sf $(notdir $<) $@

$(B)/%.so: $(B)/%.so.$(SO_MAJOR)
	ln -sf $(notdir $<) $@

$(B)/src/plot/%.o: ALL_CFLAGS += $(PLOT_CFLAGS)

$(B)/libqkv-plot.a: $(PLOT_OBJ)
	@rm -f $@
	ar rcs $@ $^

$(B)/libqkv-plot.so.$(VERSION): $(PLOT_OBJ) $(B)/libqkv.so
	$(CC) $(CFLAGS) -shared -Wl,-soname,libqkv-plot.so.$(SO_MAJOR) -o $@ $(PLOT_OBJ) -L$(B) -lqkv $(PLOT_LIBS) $(QKV_LIBS) $(LDFLAGS)

# Programs link the figures before the core: libqkv-plot uses libqkv.
PROG_LIBS = $(B)/libqkv-plot.a $(B)/libqkv.a $(EXTRA_LIBS) $(PLOT_LIBS) $(QKV_LIBS) $(LDFLAGS) $(WRAP_LDFLAGS)

$(B)/qkv: $(wildcard src/cli/*.c src/cli/*.h) $(B)/libqkv-plot.a $(B)/libqkv.a
	$(CC) $(ALL_CFLAGS) $(wildcard src/cli/*.c) -o $@ $(PROG_LIBS)

$(B)/tests/%: tests/%.c $(wildcard tests/*.h) $(B)/libqkv-plot.a $(B)/libqkv.a
	@mkdir -p $(B)/tests
	$(CC) $(ALL_CFLAGS) $< -o $@ $(PROG_LIBS)

# A shell test, tests/test_NAME.sh, runs as BUILD/tests/test_NAME on BUILD.
$(B)/tests/test_%: tests/test_%.sh
	@mkdir -p $(B)/tests
	printf '#!/bin/sh\nexec sh "%s" "%s" "$$@"\n' '$(abspath $<)' '$(abspath $(B))' > $@
	chmod +x $@

# test_nomem makes the library's allocations fail one by one (tests/test_nomem.c).
# (Not through LDFLAGS: `make sanitize` sets LDFLAGS on the command line,
# which overrides a target's additions to it.)
$(B)/tests/test_nomem: WRAP_LDFLAGS = -Wl,--wrap=malloc,--wrap=calloc,--wrap=realloc,--wrap=aligned_alloc

$(B)/bench/%: bench/%.c $(wildcard bench/*.h) $(B)/libqkv-plot.a $(B)/libqkv.a
	@mkdir -p $(B)/bench
	$(CC) $(ALL_CFLAGS) $< -o $@ $(PROG_LIBS)

test: all
	tests/run_all.sh $(B)

demo: $(B)/qkv
	$(B)/qkv demo

sanitize:
	$(MAKE) B=build-san CFLAGS="-g -fsanitize=address,undefined -fno-omit-frame-pointer -fno-sanitize-recover=undefined" \
		LDFLAGS="-fsanitize=address,undefined" OPT="-O1" test

# qkv.pc and qkv-plot.pc for `make install`; $(B)/qkv.pc and
# $(B)/qkv-plot.pc point at this tree, so a program builds against the
# build without installing:
#   cc prog.c $$(PKG_CONFIG_PATH=build pkg-config --cflags --libs qkv)
#   cc fig.c $$(PKG_CONFIG_PATH=build pkg-config --cflags --libs qkv-plot)
# Neither sets an rpath: a program built against the build tree runs with
# LD_LIBRARY_PATH=build; installed, the loader finds libqkv.so.0 where the
# system's libraries are (ldconfig) or through LD_LIBRARY_PATH.
PC_SED = sed -e 's|@BLAS_LIBS@|$(BLAS_LIBS) $(MPI_LIBS) $(DNNL_LIBS)|' -e 's|@PLOT_LIBS@|$(PLOT_LIBS)|' -e 's|@VERSION@|$(VERSION)|'

qkv.pc: qkv.pc.in include/qkv.h
	$(PC_SED) -e 's|@PREFIX@|$(PREFIX)|' -e 's|@LIBDIR@|$${prefix}/lib|' \
		-e 's|@INCLUDEDIR@|$${prefix}/include|' $< > $@

$(B)/qkv.pc: qkv.pc.in include/qkv.h
	@mkdir -p $(B)
	$(PC_SED) -e 's|@PREFIX@|$(CURDIR)|' -e 's|@LIBDIR@|$(abspath $(B))|' \
		-e 's|@INCLUDEDIR@|$(CURDIR)/include|' $< > $@

qkv-plot.pc: qkv-plot.pc.in include/qkv.h
	$(PC_SED) -e 's|@PREFIX@|$(PREFIX)|' -e 's|@LIBDIR@|$${prefix}/lib|' \
		-e 's|@INCLUDEDIR@|$${prefix}/include|' $< > $@

$(B)/qkv-plot.pc: qkv-plot.pc.in include/qkv.h
	@mkdir -p $(B)
	$(PC_SED) -e 's|@PREFIX@|$(CURDIR)|' -e 's|@LIBDIR@|$(abspath $(B))|' \
		-e 's|@INCLUDEDIR@|$(CURDIR)/include|' $< > $@

# The CMake package (cmake/qkvConfig.cmake.in: find_package(qkv) gives
# qkv::qkv and qkv::plot): $(B)/cmake/ for the build tree
# (cmake -Dqkv_DIR=$(B)/cmake), $(B)/cmake-install/ for `make install`,
# where it finds the prefix from its own place (PREFIX/lib/cmake/qkv/).
CMAKE_SED = sed -e 's|@VERSION@|$(VERSION)|g' -e 's|@SO_MAJOR@|$(SO_MAJOR)|g'

$(B)/cmake/qkvConfig.cmake: cmake/qkvConfig.cmake.in include/qkv.h
	@mkdir -p $(dir $@)
	$(CMAKE_SED) -e 's|@LIBDIR@|$(abspath $(B))|' -e 's|@INCLUDEDIR@|$(CURDIR)/include|' $< > $@

$(B)/cmake-install/qkvConfig.cmake: cmake/qkvConfig.cmake.in include/qkv.h
	@mkdir -p $(dir $@)
	$(CMAKE_SED) -e 's|@LIBDIR@|$${_qkv_prefix}/lib|' -e 's|@INCLUDEDIR@|$${_qkv_prefix}/include|' $< > $@

$(B)/cmake/qkvConfigVersion.cmake $(B)/cmake-install/qkvConfigVersion.cmake: cmake/qkvConfigVersion.cmake.in include/qkv.h
	@mkdir -p $(dir $@)
	$(CMAKE_SED) $< > $@

# Man pages (qkv.1, qkv-COMMAND.1) and bash completion, written from the
# command's own --help (tools/gen_man.sh, tools/gen_completion.sh).
$(B)/man/qkv.1: $(B)/qkv tools/gen_man.sh
	tools/gen_man.sh $(B)/qkv $(B)/man

$(B)/completion/qkv: $(B)/qkv tools/gen_completion.sh
	tools/gen_completion.sh $(B)/qkv $@

install: $(B)/man/qkv.1 $(B)/completion/qkv $(B)/libqkv.a $(B)/libqkv.so $(B)/libqkv-plot.a $(B)/libqkv-plot.so $(B)/qkv qkv.pc qkv-plot.pc \
		$(B)/cmake-install/qkvConfig.cmake $(B)/cmake-install/qkvConfigVersion.cmake
	install -d $(DESTDIR)$(PREFIX)/lib/pkgconfig $(DESTDIR)$(PREFIX)/lib/cmake/qkv $(DESTDIR)$(PREFIX)/include/qkv \
		$(DESTDIR)$(PREFIX)/bin
	install -m 644 $(B)/libqkv.a $(B)/libqkv-plot.a $(DESTDIR)$(PREFIX)/lib/
	for l in libqkv libqkv-plot; do \
		install -m 644 $(B)/$$l.so.$(VERSION) $(DESTDIR)$(PREFIX)/lib/ && \
		ln -sf $$l.so.$(VERSION) $(DESTDIR)$(PREFIX)/lib/$$l.so.$(SO_MAJOR) && \
		ln -sf $$l.so.$(SO_MAJOR) $(DESTDIR)$(PREFIX)/lib/$$l.so || exit 1; \
	done
	install -m 644 include/qkv.h $(DESTDIR)$(PREFIX)/include/
	install -m 644 include/qkv/*.h $(DESTDIR)$(PREFIX)/include/qkv/
	install -m 644 qkv.pc qkv-plot.pc $(DESTDIR)$(PREFIX)/lib/pkgconfig/
	install -m 644 $(B)/cmake-install/qkvConfig.cmake $(B)/cmake-install/qkvConfigVersion.cmake \
		$(DESTDIR)$(PREFIX)/lib/cmake/qkv/
	install -m 755 $(B)/qkv $(DESTDIR)$(PREFIX)/bin/
	install -d $(DESTDIR)$(PREFIX)/share/man/man1 $(DESTDIR)$(PREFIX)/share/bash-completion/completions
	install -m 644 $(B)/man/*.1 $(DESTDIR)$(PREFIX)/share/man/man1/
	install -m 644 $(B)/completion/qkv $(DESTDIR)$(PREFIX)/share/bash-completion/completions/

# libFuzzer targets, one per reader of outside data: every tests/fuzz/fuzz_*.c
# (tests/fuzz/README.md). Needs clang; not part of `all` or `test`.
#   make fuzz              the library built into build-fuzz/ by clang with
#                          -fsanitize=fuzzer-no-link,address,undefined, and
#                          build-fuzz/fuzz/fuzz_NAME for each target;
#                          FUZZING_BUILD_MODE_UNSAFE_FOR_PRODUCTION (the
#                          usual macro) lets the PNG reader skip CRCs
#   tests/fuzz/run.sh [SECONDS]   each target over its corpus (CI: 20 s each)
FUZZ_CC ?= clang
FUZZ_B  := build-fuzz
FUZZ_SAN := -fsanitize=address,undefined -fno-sanitize-recover=all -fno-omit-frame-pointer
FUZZ_SRC := $(sort $(wildcard tests/fuzz/fuzz_*.c))
FUZZ_BINS := $(FUZZ_SRC:tests/fuzz/%.c=$(B)/fuzz/%)

fuzz:
	$(MAKE) B=$(FUZZ_B) CC=$(FUZZ_CC) OPT="-O1" \
		CFLAGS="-g -fsanitize=fuzzer-no-link -DFUZZING_BUILD_MODE_UNSAFE_FOR_PRODUCTION $(FUZZ_SAN)" \
		LDFLAGS="$(FUZZ_SAN)" fuzz-targets

fuzz-targets: $(FUZZ_BINS)

$(B)/fuzz/%: tests/fuzz/%.c $(wildcard tests/fuzz/*.h) $(B)/libqkv.a
	@mkdir -p $(B)/fuzz
	$(CC) $(ALL_CFLAGS) -fsanitize=fuzzer $< -o $@ $(B)/libqkv.a $(QKV_LIBS) $(LDFLAGS)

# The command line is not in libqkv: fuzz_cli_* targets link its parsers.
$(B)/fuzz/fuzz_cli_%: tests/fuzz/fuzz_cli_%.c src/cli/args.c src/cli/cli.h $(B)/libqkv.a
	@mkdir -p $(B)/fuzz
	$(CC) $(ALL_CFLAGS) -fsanitize=fuzzer $< src/cli/args.c -o $@ $(B)/libqkv.a $(QKV_LIBS) $(LDFLAGS)

clean:
	rm -rf build build-san build-fuzz qkv.pc qkv-plot.pc

.PHONY: all test demo sanitize install clean fuzz fuzz-targets
.SECONDARY:
