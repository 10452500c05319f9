# hora -- build, test, install.
#   make            horarun, horad, libhora.so/.a, hora.pc
#   make check      build and run every test
#   make asan       the same under AddressSanitizer + UBSan (in build-asan/)
#   make bench      allreduce_perf -c each collective beside OpenMPI's
#   make install PREFIX=/usr/local [DESTDIR=...]  (also the Python package,
#                   in PYDIR, for the interpreter PYTHON)

VERSION    := 0.1.0
PREFIX     ?= /usr/local
BUILD      ?= build
PYTHON     ?= /usr/bin/python3
CUDA_HOME  ?= /usr/local/cuda
CC         ?= cc
GIT_SHA    := $(shell git rev-parse --short HEAD 2>/dev/null)
PYVER      := $(shell $(PYTHON) -c 'import sys; print("%d.%d" % sys.version_info[:2])' 2>/dev/null)
PYDIR      ?= $(PREFIX)/lib/python$(PYVER)/dist-packages

PKGS       := libuv yaml-0.1 libcrypto
PKG_CFLAGS := $(shell pkg-config --cflags $(PKGS) 2>/dev/null)
PKG_LIBS   := $(shell pkg-config --libs $(PKGS) 2>/dev/null)

OPT        ?= -O2
CFLAGS     ?= $(OPT) -g
WARN       := -Wall -Wextra -Wshadow -Wno-unused-parameter
DEFS       := -D_GNU_SOURCE -DHORA_VERSION_STRING='"$(VERSION)"'
ifneq ($(GIT_SHA),)
DEFS       += -DHORA_GIT_SHA='"$(GIT_SHA)"'
endif
ifeq ($(SAN),1)
CFLAGS     += -fsanitize=address,undefined -fno-omit-frame-pointer -fno-sanitize-recover=undefined
LDFLAGS    += -fsanitize=address,undefined
endif

# CUDA and NCCL are optional: found here, they enable the GPU engine.
HAVE_CUDA  := $(shell test -f $(CUDA_HOME)/include/cuda_runtime.h && echo 1)
HAVE_NCCL  := $(shell test -f $(CUDA_HOME)/include/nccl.h -o -f /usr/include/nccl.h && echo 1)

ALL_CFLAGS := -std=c11 $(WARN) $(DEFS) -pthread -fPIC -Iinclude -Icommon -Iproto $(PKG_CFLAGS) $(CFLAGS)

COMMON_SRC   := common/log.c common/err.c common/params.c common/scale.c common/reduce.c common/files.c proto/msg.c
NET_SRC      := proto/auth.c proto/conn.c
DAEMON_SRC   := $(wildcard daemon/*.c daemon/*/*.c)
LAUNCHER_SRC := $(wildcard launcher/*.c)
CLIENT_SRC   := $(wildcard libclient/*.c)

obj = $(patsubst %.c,$(BUILD)/obj/%.o,$(1))

BIN     := $(BUILD)/bin
LIB     := $(BUILD)/lib
HORARUN := $(BIN)/horarun
HORAD   := $(BIN)/horad
LIBSO   := $(LIB)/libhora.so
LIBA    := $(LIB)/libhora.a
PC      := $(LIB)/pkgconfig/hora.pc

UNIT_SRC  := $(wildcard tests/unit/test_*.c)
UNIT_BIN  := $(patsubst tests/unit/%.c,$(BUILD)/tests/%,$(UNIT_SRC))
ITEST_SRC := $(wildcard tests/integration/*.c)
ITEST_BIN := $(patsubst tests/integration/%.c,$(BUILD)/tests/%,$(ITEST_SRC))
EXAMPLES  := $(patsubst examples/%.c,$(BUILD)/examples/%,$(wildcard examples/*.c))
BENCH     := $(BUILD)/benchmarks/allreduce_perf $(BUILD)/benchmarks/fusion_perf \
             $(BUILD)/benchmarks/cma_perf $(BUILD)/benchmarks/pingpong

.PHONY: all check asan bench install uninstall clean deps format
all: $(HORARUN) $(HORAD) $(LIBSO) $(LIBA) $(PC) $(EXAMPLES) $(BENCH)

deps:
	@sh tests/deps.sh

$(BUILD)/obj/%.o: %.c
	@mkdir -p $(dir $@)
	$(CC) $(ALL_CFLAGS) -MMD -MP -c $< -o $@

$(HORAD): $(call obj,$(DAEMON_SRC) $(COMMON_SRC) $(NET_SRC))
	@mkdir -p $(dir $@)
	$(CC) $(ALL_CFLAGS) $^ -o $@ $(LDFLAGS) $(PKG_LIBS) -lm

$(HORARUN): $(call obj,$(LAUNCHER_SRC) $(COMMON_SRC) $(NET_SRC))
	@mkdir -p $(dir $@)
	$(CC) $(ALL_CFLAGS) $^ -o $@ $(LDFLAGS) $(PKG_LIBS)

$(LIBSO): $(call obj,$(CLIENT_SRC) $(COMMON_SRC)) libclient/libhora.map
	@mkdir -p $(dir $@)
	$(CC) $(ALL_CFLAGS) -shared -Wl,--version-script=libclient/libhora.map \
	  -Wl,-soname,libhora.so.0 $(call obj,$(CLIENT_SRC) $(COMMON_SRC)) -o $@ $(LDFLAGS)
	ln -sf libhora.so $(LIB)/libhora.so.0

$(LIBA): $(call obj,$(CLIENT_SRC) $(COMMON_SRC))
	@mkdir -p $(dir $@)
	rm -f $@ && ar rcs $@ $^

$(PC): Makefile
	@mkdir -p $(dir $@)
	printf 'prefix=%s\nlibdir=$${prefix}/lib\nincludedir=$${prefix}/include\n\nName: hora\nDescription: distributed training runtime (client library)\nVersion: %s\nLibs: -L$${libdir} -lhora\nLibs.private: -pthread\nCflags: -I$${includedir}\n' \
	  '$(PREFIX)' '$(VERSION)' > $@

# Programs that link libhora: examples, benchmarks, integration tests.
LINK_HORA = -L$(LIB) -lhora -Wl,-rpath,'$$ORIGIN/../lib' -lm

$(BUILD)/examples/%: examples/%.c $(LIBSO)
	@mkdir -p $(dir $@)
	$(CC) $(ALL_CFLAGS) $< -o $@ $(LDFLAGS) $(LINK_HORA)

$(BUILD)/benchmarks/%_perf: benchmarks/%_perf.c $(LIBSO)
	@mkdir -p $(dir $@)
	$(CC) $(ALL_CFLAGS) $< -o $@ $(LDFLAGS) $(LINK_HORA)

$(BUILD)/benchmarks/pingpong: benchmarks/pingpong.c
	@mkdir -p $(dir $@)
	$(CC) $(ALL_CFLAGS) $< -o $@ $(LDFLAGS)

$(BUILD)/benchmarks/mpi_allreduce_perf: benchmarks/peers/mpi_allreduce_perf.c
	@mkdir -p $(dir $@)
	mpicc -O2 -std=c11 -D_GNU_SOURCE $< -o $@

# Unit tests link the objects they test directly.
UNIT_OBJS := $(call obj,$(COMMON_SRC) $(NET_SRC) $(filter-out daemon/main.c,$(DAEMON_SRC)) \
               $(filter-out launcher/main.c,$(LAUNCHER_SRC)))
$(BUILD)/tests/test_%: tests/unit/test_%.c $(UNIT_OBJS)
	@mkdir -p $(dir $@)
	$(CC) $(ALL_CFLAGS) -MMD -MP -Idaemon -Ilauncher -Ilibclient -Itests/unit $(filter %.c %.o,$^) -o $@ $(LDFLAGS) $(PKG_LIBS) -lm

$(BUILD)/tests/%: tests/integration/%.c $(LIBSO)
	@mkdir -p $(dir $@)
	$(CC) $(ALL_CFLAGS) $< -o $@ $(LDFLAGS) $(LINK_HORA)

# it_version speaks the protocol itself too (a libhora of another release).
$(BUILD)/tests/it_version: tests/integration/it_version.c $(LIBSO) $(call obj,$(COMMON_SRC))
	@mkdir -p $(dir $@)
	$(CC) $(ALL_CFLAGS) $< $(call obj,$(COMMON_SRC)) -o $@ $(LDFLAGS) $(LINK_HORA)

# Multi-host tests (tests/multihost/): mh_loop is a rank (links libhora);
# mh_probe speaks the wire protocol itself, as a stranger would; mh_munge
# is a MUNGE client of the service that misbehaves; mh_relay a man in the
# middle that flips a bit.
MH_BIN := $(BUILD)/tests/mh_loop $(BUILD)/tests/mh_probe $(BUILD)/tests/mh_munge \
          $(BUILD)/tests/mh_relay
$(BUILD)/tests/mh_loop: tests/multihost/mh_loop.c $(LIBSO)
	@mkdir -p $(dir $@)
	$(CC) $(ALL_CFLAGS) $< -o $@ $(LDFLAGS) $(LINK_HORA)

$(BUILD)/tests/mh_probe: tests/multihost/mh_probe.c $(call obj,$(COMMON_SRC) proto/auth.c)
	@mkdir -p $(dir $@)
	$(CC) $(ALL_CFLAGS) $^ -o $@ $(LDFLAGS) $(PKG_LIBS)

$(BUILD)/tests/mh_relay: tests/multihost/mh_relay.c
	@mkdir -p $(dir $@)
	$(CC) $(ALL_CFLAGS) $< -o $@ $(LDFLAGS)

$(BUILD)/tests/mh_munge: tests/multihost/mh_munge.c $(call obj,$(COMMON_SRC) proto/auth.c daemon/munge.c)
	@mkdir -p $(dir $@)
	$(CC) $(ALL_CFLAGS) -Idaemon $^ -o $@ $(LDFLAGS) $(PKG_LIBS)

# A stand-in for the CUDA driver, for the tests of device buffers
# (it_cuda): libhora finds it as it finds the real one.
FAKECUDA := $(BUILD)/tests/fakecuda/libcuda.so.1
$(FAKECUDA): tests/fakecuda/libcuda.c
	@mkdir -p $(dir $@)
	$(CC) $(ALL_CFLAGS) -shared -Wl,-soname,libcuda.so.1 $< -o $@ $(LDFLAGS)

check: all $(UNIT_BIN) $(ITEST_BIN) $(MH_BIN) $(FAKECUDA)
	@BUILD=$(BUILD) PYTHON=$(PYTHON) sh tests/run.sh

asan:
	$(MAKE) BUILD=build-asan SAN=1 OPT=-O1 check

bench: all $(BUILD)/benchmarks/mpi_allreduce_perf
	@BUILD=$(BUILD) sh benchmarks/run.sh

install: all
	install -d $(DESTDIR)$(PREFIX)/bin $(DESTDIR)$(PREFIX)/lib/pkgconfig \
	  $(DESTDIR)$(PREFIX)/include $(DESTDIR)$(PREFIX)/share/man/man1 \
	  $(DESTDIR)$(PREFIX)/share/man/man3 $(DESTDIR)$(PREFIX)/share/man/man5 \
	  $(DESTDIR)$(PREFIX)/share/man/man8 $(DESTDIR)$(PREFIX)/lib/systemd/system
	install -m 755 $(HORARUN) $(HORAD) $(DESTDIR)$(PREFIX)/bin/
	install -m 755 $(LIBSO) $(DESTDIR)$(PREFIX)/lib/libhora.so.0
	ln -sf libhora.so.0 $(DESTDIR)$(PREFIX)/lib/libhora.so
	install -m 644 $(LIBA) $(DESTDIR)$(PREFIX)/lib/
	sed 's|^prefix=.*|prefix=$(PREFIX)|' $(PC) > $(DESTDIR)$(PREFIX)/lib/pkgconfig/hora.pc
	install -m 644 include/hora.h $(DESTDIR)$(PREFIX)/include/
	install -m 644 man/horarun.1 $(DESTDIR)$(PREFIX)/share/man/man1/
	install -m 644 man/hora.3 $(DESTDIR)$(PREFIX)/share/man/man3/
	install -m 644 man/hora.yaml.5 $(DESTDIR)$(PREFIX)/share/man/man5/
	install -m 644 man/horad.8 $(DESTDIR)$(PREFIX)/share/man/man8/
	sed 's|@PREFIX@|$(PREFIX)|' configs/horad.service > $(DESTDIR)$(PREFIX)/lib/systemd/system/horad.service
	install -m 644 configs/horad.socket $(DESTDIR)$(PREFIX)/lib/systemd/system/horad.socket
	install -d $(DESTDIR)$(PREFIX)/share/hora
	install -m 644 configs/horad.yaml $(DESTDIR)$(PREFIX)/share/hora/horad.yaml
	@if [ -n "$(PYVER)" ]; then \
	  echo "installing the hora Python package in $(PYDIR)"; \
	  install -d $(DESTDIR)$(PYDIR)/hora/torch && \
	  install -m 644 python/hora/*.py $(DESTDIR)$(PYDIR)/hora/ && \
	  install -m 644 python/hora/torch/*.py $(DESTDIR)$(PYDIR)/hora/torch/; \
	fi

uninstall:
	rm -f $(DESTDIR)$(PREFIX)/bin/horarun $(DESTDIR)$(PREFIX)/bin/horad \
	  $(DESTDIR)$(PREFIX)/lib/libhora.so* $(DESTDIR)$(PREFIX)/lib/libhora.a \
	  $(DESTDIR)$(PREFIX)/lib/pkgconfig/hora.pc $(DESTDIR)$(PREFIX)/include/hora.h \
	  $(DESTDIR)$(PREFIX)/share/man/man1/horarun.1 $(DESTDIR)$(PREFIX)/share/man/man3/hora.3 \
	  $(DESTDIR)$(PREFIX)/share/man/man8/horad.8 \
	  $(DESTDIR)$(PREFIX)/share/man/man5/hora.yaml.5 \
	  $(DESTDIR)$(PREFIX)/lib/systemd/system/horad.service \
	  $(DESTDIR)$(PREFIX)/lib/systemd/system/horad.socket \
	  $(DESTDIR)$(PREFIX)/share/hora/horad.yaml
	rm -rf $(DESTDIR)$(PYDIR)/hora

format:
	clang-format -i $(shell git ls-files '*.c' '*.h')

clean:
	rm -rf build build-asan

-include $(shell find $(BUILD)/obj -name '*.d' 2>/dev/null)
-include $(wildcard $(BUILD)/tests/test_*.d)
