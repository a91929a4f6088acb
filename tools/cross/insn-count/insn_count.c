/* A QEMU TCG plug-in that counts the instructions a program executes inside one address range, by
 * class: SVE FMA (FMLA or FMAD, predicated, vectors), LD1RW (broadcast load), LD1W (contiguous load), other.
 *   qemu-aarch64 -cpu a64fx -plugin ./libinsn_count.so,lo=0x...,hi=0x... ./program
 * prints one line at exit: "insn_count range=LO-HI total=.. fma=.. ld1rw=.. ld1w=.. other=..".
 * Counts are exact (inline adds on every executed instruction) for a single-threaded program.
 *
 * Debian's qemu-user (7.2) runs plug-ins (-plugin) but ships neither its example plug-ins nor the API
 * header, so the few entry points used here are declared below, as documented for plug-in API
 * version 1 (QEMU 4.2 to 7.2): the plug-in exports qemu_plugin_version and qemu_plugin_install, and
 * calls the qemu_plugin_* functions the emulator exports. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef uint64_t qemu_plugin_id_t;
struct qemu_info_t;
struct qemu_plugin_tb;
struct qemu_plugin_insn;
enum qemu_plugin_op { QEMU_PLUGIN_INLINE_ADD_U64 };

void qemu_plugin_register_vcpu_tb_trans_cb(qemu_plugin_id_t id,
                                           void (*cb)(qemu_plugin_id_t id, struct qemu_plugin_tb* tb));
size_t qemu_plugin_tb_n_insns(const struct qemu_plugin_tb* tb);
struct qemu_plugin_insn* qemu_plugin_tb_get_insn(const struct qemu_plugin_tb* tb, size_t index);
const void* qemu_plugin_insn_data(const struct qemu_plugin_insn* insn);
size_t qemu_plugin_insn_size(const struct qemu_plugin_insn* insn);
uint64_t qemu_plugin_insn_vaddr(const struct qemu_plugin_insn* insn);
void qemu_plugin_register_vcpu_insn_exec_inline(struct qemu_plugin_insn* insn, enum qemu_plugin_op op, void* ptr,
                                                uint64_t imm);
void qemu_plugin_register_atexit_cb(qemu_plugin_id_t id, void (*cb)(qemu_plugin_id_t id, void* userdata),
                                    void* userdata);
void qemu_plugin_outs(const char* string);

__attribute__((visibility("default"))) int qemu_plugin_version = 1;

enum { kTotal, kFma, kLd1rw, kLd1w, kOther, kClasses };
static uint64_t counts[kClasses];
static uint64_t range_lo, range_hi = UINT64_MAX;

/* The class of one A64 instruction word (SVE encodings from the Arm ARM). */
static int classify(uint32_t w) {
  if ((w & 0xFF20E000u) == 0x65200000u) return kFma;                                            /* FMLA Zda, Pg/M, Zn, Zm */
  if ((w & 0xFF20E000u) == 0x65208000u) return kFma;                                            /* FMAD Zdn, Pg/M, Zm, Za */
  if ((w & 0xFFC0E000u) == 0x8540C000u) return kLd1rw;                                          /* LD1RW {Zt.S}, Pg/Z, [Xn, #imm] */
  if ((w & 0xFFF0E000u) == 0xA540A000u || (w & 0xFFE0E000u) == 0xA5404000u) return kLd1w;       /* LD1W imm / reg offset */
  return kOther;
}

static void on_translate(qemu_plugin_id_t id, struct qemu_plugin_tb* tb) {
  (void)id;
  const size_t n = qemu_plugin_tb_n_insns(tb);
  for (size_t i = 0; i < n; ++i) {
    struct qemu_plugin_insn* insn = qemu_plugin_tb_get_insn(tb, i);
    const uint64_t pc = qemu_plugin_insn_vaddr(insn);
    if (pc < range_lo || pc >= range_hi || qemu_plugin_insn_size(insn) != 4) continue;
    uint32_t word;
    memcpy(&word, qemu_plugin_insn_data(insn), sizeof word);
    qemu_plugin_register_vcpu_insn_exec_inline(insn, QEMU_PLUGIN_INLINE_ADD_U64, &counts[kTotal], 1);
    qemu_plugin_register_vcpu_insn_exec_inline(insn, QEMU_PLUGIN_INLINE_ADD_U64, &counts[classify(word)], 1);
  }
}

static void report_at_exit(qemu_plugin_id_t id, void* userdata) {
  (void)id, (void)userdata;
  char line[256];
  snprintf(line, sizeof line,
           "insn_count range=0x%llx-0x%llx total=%llu fma=%llu ld1rw=%llu ld1w=%llu other=%llu\n",
           (unsigned long long)range_lo, (unsigned long long)range_hi, (unsigned long long)counts[kTotal],
           (unsigned long long)counts[kFma], (unsigned long long)counts[kLd1rw], (unsigned long long)counts[kLd1w],
           (unsigned long long)counts[kOther]);
  qemu_plugin_outs(line);
}

__attribute__((visibility("default"))) int qemu_plugin_install(qemu_plugin_id_t id, const struct qemu_info_t* info,
                                                               int argc, char** argv) {
  (void)info;
  for (int i = 0; i < argc; ++i) {
    if (strncmp(argv[i], "lo=", 3) == 0) range_lo = strtoull(argv[i] + 3, NULL, 0);
    else if (strncmp(argv[i], "hi=", 3) == 0) range_hi = strtoull(argv[i] + 3, NULL, 0);
    else {
      fprintf(stderr, "insn_count: unknown argument '%s' (expected lo=ADDRESS, hi=ADDRESS)\n", argv[i]);
      return -1;
    }
  }
  qemu_plugin_register_vcpu_tb_trans_cb(id, on_translate);
  qemu_plugin_register_atexit_cb(id, report_at_exit, NULL);
  return 0;
}
