#!/usr/bin/python3
"""gen_bad_args.py: writes tests/test_bad_args.c, the bad-argument test of
every public function, from the public headers (include/qkv.h,
include/qkv/*.h).

For each function and each pointer argument it makes a call with that
pointer NULL and the other arguments valid-looking (a real ctx, arena,
params store and tensor made in the test's setup, zeroed buffers and
zeroed structs, 1 for numbers); for each integer argument a call with -1
and one with the type's largest value. Each call runs in a forked child
(so a crash is reported, not fatal). The test checks: no crash, hang or
sanitizer report; a qkv_status function given a NULL it cannot accept
returns an error; every error's message starts with the function's name
without the qkv_ prefix. The NULLs the headers allow are in ALLOWED below.
    /usr/bin/python3 tools/gen_bad_args.py     (from the repository root)
"""
import glob, re, sys

HEADERS = ['include/qkv.h'] + sorted(glob.glob('include/qkv/*.h'))

# Pointer arguments the header documents as optional ("or NULL", "may be
# NULL"): a call with that NULL may return OK. (function, argument): why.
ALLOWED = {
    ('qkv_rms_norm', 'weight'): 'weight (C) or NULL',
    ('qkv_tokenizer_wordpiece_load', 'o'): 'o NULL: defaults',
    ('qkv_tokenizer_encode_bert', 'n_full'): '*n_full gets the length before the cut (NULL allowed)',
    ('qkv_linear', 'b'): 'b (out) or NULL',
    ('qkv_linear_relu', 'b'): 'shapes as qkv_linear: b (out) or NULL',
    ('qkv_softmax', 'key_padding_mask'): 'key_padding_mask: NULL or BOOL',
    ('qkv_image_fit', 'changes'): '*changes (may be NULL)',
    ('qkv_gelu', 'approximate'): 'approximate: "none" (or NULL)',
    ('qkv_nn_gelu_init', 'approximate'): 'approximate: "none" (or NULL)',
    ('qkv_rope', 'opts'): 'opts NULL: the defaults',
    ('qkv_clip_grad_norm', 'total_norm'): 'total_norm (may be NULL)',
    ('qkv_checkpoint_save', 'optim'): 'optim, pos and rng may each be NULL',
    ('qkv_checkpoint_save_meta', 'optim'): 'optim, pos and rng may each be NULL',
    ('qkv_checkpoint_load', 'optim'): 'optim, pos and rng may be NULL',
    ('qkv_checkpoint_load', 'pos'): 'optim, pos and rng may be NULL',
    ('qkv_checkpoint_load', 'rng'): 'optim, pos and rng may be NULL',
    ('qkv_checkpoint_save', 'pos'): 'optim, pos and rng may each be NULL',
    ('qkv_checkpoint_save', 'rng'): 'optim, pos and rng may each be NULL',
    ('qkv_checkpoint_save_meta', 'pos'): 'optim, pos and rng may each be NULL',
    ('qkv_checkpoint_save_meta', 'rng'): 'optim, pos and rng may each be NULL',
    ('qkv_checkpoint_save_meta', 'meta'): 'meta (NULL: none)',
    ('qkv_dist_checkpoint_save', 'd'): 'd and meta may be NULL',
    ('qkv_dist_checkpoint_save', 'meta'): 'd and meta may be NULL',
    ('qkv_dist_optim_step', 'd'): 'd NULL: one process',
    # The kind the generator passes (1, scaled dot) has no parameters.
    ('qkv_params_load_safetensors', 'report'): 'report may be NULL',
    ('qkv_params_load_st', 'report'): 'report may be NULL',
    ('qkv_score_init', 'p'): 'unused by the scaled-dot score',
    ('qkv_score_init', 'prefix'): 'unused by the scaled-dot score',
    ('qkv_score_init', 'rng'): 'unused by the scaled-dot score',
}
# Every prefix argument: "prefix NULL means \"\"" (io.h), as params_add does.
ALLOWED_ARGS = {'prefix': 'prefix NULL means ""'}

# Raw buffers the caller owns: a function cannot know their length, so a
# huge count or size for one of them is the caller's error, not checked.
BUFFER_TYPES = {'float', 'double', 'int64_t', 'int', 'uint8_t', 'void', 'unsigned', 'size_t'}

# Opaque types the setup can make (others: their other-argument cases are
# not run, the opaque pointer's own NULL case is).
MAKE = {
    'qkv_ctx': 'g_ctx', 'qkv_arena': 'g_arena', 'qkv_params': 'g_params',
    'qkv_tensor': 'g_t', 'qkv_rng': '&g_rng', 'FILE': 'g_file',
    'qkv_optim': 'g_optim', 'qkv_safetensors': 'g_st', 'qkv_tokenizer': 'g_tok',
}


def parse():
    funcs, opaque, structs = [], set(), set()
    for p in HEADERS:
        s = open(p).read()
        s = re.sub(r'/\*.*?\*/', '', s, flags=re.S)
        s = s.replace('\\\n', ' ')  # a #define's continued lines are its own
        s = re.sub(r'//[^\n]*', '', s)
        s = re.sub(r'^\s*#[^\n]*', '', s, flags=re.M)
        s = s.replace('extern "C" {', '')
        for m in re.finditer(r'typedef struct (\w+) (\w+);', s):
            opaque.add(m.group(2))
        for m in re.finditer(r'\bstruct (\w+) \{', s):
            opaque.discard(m.group(1))
        while True:
            t = re.sub(r'\{[^{}]*\}', '{}', s)
            if t == s:
                break
            s = t
        for m in re.finditer(r'typedef struct (?:\w+ )?\{\} (\w+);', s):
            structs.add(m.group(1))
        structs.add('qkv_tensor'); structs.add('qkv_module')
        for d in s.split(';'):
            d = ' '.join(d.split())
            if d.startswith('typedef') or '(' not in d:
                continue
            m = re.match(r'^(.*?)\b(qkv_\w+)\s*\((.*)\)$', d)
            if not m:
                sys.exit('cannot parse: ' + d)
            ps, depth, cur = [], 0, ''
            for ch in m.group(3):
                if ch == ',' and depth == 0:
                    ps.append(cur.strip()); cur = ''; continue
                depth += ch == '('; depth -= ch == ')'; cur += ch
            ps.append(cur.strip())
            if ps == ['void']:
                ps = []
            args = []
            for a in ps:
                am = re.match(r'^(.*?)(\w+)$', a)
                args.append((am.group(1).strip(), am.group(2)))
            if 'QKV_DEPRECATED' in m.group(1):
                continue  # an old name, a wrapper of its new one (tested under that)
            ret = re.sub(r'\bQKV_API\b', '', m.group(1)).strip()  # the export mark
            funcs.append((p, ret, m.group(2), args))
    return funcs, opaque, structs


def base_type(t):
    return re.sub(r'\bconst\b|\*', '', t).strip()


def is_ptr(t):
    return '*' in t or t.endswith('_fn')


def valid(t, opaque, structs):
    """C expression of a valid-looking value of type t, or None."""
    b, stars = base_type(t), t.count('*')
    if t.endswith('_fn') and stars == 0:
        return None
    if stars == 0:
        if b in structs:
            return '(%s){0}' % t
        if b in ('float', 'double'):
            return '1'
        return '(%s)1' % t
    if stars >= 2:
        if b == 'char':
            return '(%s)g_strs' % t
        if b == 'qkv_tensor':
            return '(%s)g_tens' % t
        return '(%s)g_nulls' % t
    if b in MAKE:
        return '(%s)%s' % (t, MAKE[b])
    if b in opaque:
        return None
    if b == 'char':
        return '"x"' if 'const' in t else 'g_buf'
    if b == 'int64_t' and 'const' in t:
        return '(%s)g_ones' % t
    return '(%s)g_zero' % t


def huge(t):
    b = base_type(t)
    return {'int64_t': 'INT64_MAX', 'int': 'INT_MAX', 'size_t': 'SIZE_MAX'}.get(b)


def main():
    funcs, opaque, structs = parse()
    cases, skipped = [], []
    for hdr, ret, name, args in funcs:
        vals = [valid(t, opaque, structs) for t, _ in args]
        n0 = len(cases)
        for i, (t, an) in enumerate(args):
            bad = []
            if is_ptr(t):
                bad.append(('NULL', 'NULL'))
            elif huge(t) and '*' not in t:
                bufs = [a for a, _ in args if (a.count('*') == 1 and base_type(a) in BUFFER_TYPES)
                        or (a.count('*') == 2 and base_type(a) in ('char', 'qkv_tensor'))
                        or (a.count('*') == 1 and base_type(a) == 'char'
                            and ('const' not in a or an in ('len', 'n')))]
                if base_type(t) != 'size_t' or not bufs:
                    bad.append(('-1', '(%s)-1' % t))
                if bufs:
                    skipped.append((name, an, huge(t) + (' and -1' if base_type(t) == 'size_t' else ''),
                                    'a length of caller-owned memory (%s): not checkable' % bufs[0]))
                else:
                    bad.append((huge(t), huge(t)))
            for label, expr in bad:
                others = [v for j, v in enumerate(vals) if j != i]
                if any(v is None for v in others):
                    miss = sorted({base_type(args[j][0]) for j, v in enumerate(vals) if j != i and v is None})
                    skipped.append((name, an, label, 'needs a real ' + ', '.join(miss)))
                    continue
                call = ', '.join(expr if j == i else vals[j] for j in range(len(args)))
                kind = 'status' if ret == 'qkv_status' else 'other'
                must = kind == 'status' and label == 'NULL' and (name, an) not in ALLOWED and an not in ALLOWED_ARGS
                cases.append((name, an, label, kind, must, call, ret))
        if len(cases) == n0 and not any(k[0] == name for k in skipped):
            skipped.append((name, '-', '-', 'no pointer or integer argument' if args else 'no arguments'))
    out = []
    w = out.append
    w('/* test_bad_args.c: GENERATED by tools/gen_bad_args.py from the public')
    w(' * headers; do not edit (regenerate: /usr/bin/python3 tools/gen_bad_args.py).')
    w(' * Every public function with each pointer argument NULL and each integer')
    w(' * argument -1 or huge, the others valid-looking; each call runs in a forked')
    w(' * child. Checks: no crash, hang or sanitizer report; a NULL the function')
    w(' * cannot accept gives an error; every error message starts with the')
    w(' * function\'s name without qkv_. QKV_BAD_ARGS_TABLE=FILE writes the table')
    w(' * of docs/bad_inputs.md (tools/bad_inputs_table.sh). */')
    w('#define _DEFAULT_SOURCE')
    w('#include <limits.h>')
    w('#include <signal.h>')
    w('#include <stdint.h>')
    w('#include <sys/wait.h>')
    w('#include <unistd.h>')
    w('#include "harness.h"')
    w('#include "qkv/plot.h"')
    w('')
    w('/* Huge sizes must give QKV_ERR_NOMEM (or an argument error), not an abort. */')
    w('const char *__asan_default_options(void);')
    w('const char *__asan_default_options(void) { return "allocator_may_return_null=1"; }')
    w('')
    w('qkv_status qkv_fail(qkv_status s, const char *fmt, ...); /* libqkv\'s, to clear the message */')
    w('static qkv_ctx *g_ctx;')
    w('static qkv_arena *g_arena;')
    w('static qkv_params *g_params;')
    w('static qkv_tensor *g_t;')
    w('static qkv_rng g_rng;')
    w('static FILE *g_file, *g_table;')
    w('static _Alignas(64) unsigned char g_zero[1 << 16];')
    w('static char g_buf[4096];')
    w('static int64_t g_ones[64];')
    w('static const char *g_strs[16];')
    w('static qkv_tensor *g_tens[16];')
    w('static void *g_nulls[16];')
    w('static qkv_optim *g_optim;')
    w('static qkv_safetensors *g_st;')
    w('static qkv_tokenizer *g_tok;')
    w('static char g_dir[64] = "/tmp/qkv_bad_args_XXXXXX", g_cwd[4096];')
    w('static int g_cases, g_bad;')
    w('')
    w('typedef struct { int status; int ret_null; char msg[480]; } result;')
    w('')
    w('static void setup(void)')
    w('{')
    w('    CHECK_OK(qkv_ctx_new(&g_ctx));')
    w('    CHECK_OK(qkv_arena_new(&g_arena, 1 << 16));')
    w('    CHECK_OK(qkv_params_new(&g_params));')
    w('    int64_t sh[2] = {2, 2};')
    w('    CHECK_OK(qkv_tensor_new(g_arena, QKV_F32, 2, sh, &g_t));')
    w('    qkv_rng_seed(&g_rng, 1);')
    w('    g_file = tmpfile();')
    w('    for (int i = 0; i < 64; i++) g_ones[i] = 1;')
    w('    for (int i = 0; i < 16; i++) g_strs[i] = "x", g_tens[i] = g_t;')
    w('    /* Files the calls write (path "x") go to a directory of their own. */')
    w('    CHECK(getcwd(g_cwd, sizeof g_cwd) && mkdtemp(g_dir) && chdir(g_dir) == 0, "temporary directory");')
    w('    qkv_tensor *w;')
    w('    CHECK_OK(qkv_params_add(g_params, "", "w", 2, sh, &w));')
    w('    qkv_optim_opts oo = qkv_optim_sgd_opts_default(0.1);')
    w('    CHECK_OK(qkv_optim_new(&g_optim, g_params, &oo));')
    w('    const char *names[1] = {"w"};')
    w('    const qkv_tensor *ts[1] = {w};')
    w('    CHECK_OK(qkv_safetensors_save("setup.safetensors", 1, names, ts, 0, NULL, NULL));')
    w('    CHECK_OK(qkv_safetensors_open("setup.safetensors", &g_st));')
    w('    CHECK_OK(qkv_tokenizer_open("bytes", &g_tok));')
    w('}')
    w('')
    w('static void cell(const char *s)')
    w('{')
    w('    for (const char *p = s; *p; p++) {')
    w('        if (*p == \'|\') fputs("\\\\|", g_table);')
    w('        else if (*p == \'\\n\') fputc(\' \', g_table);')
    w('        else if (*p == \'`\') fputc(\'\\\'\', g_table);')
    w('        else fputc(*p, g_table);')
    w('    }')
    w('}')
    w('')
    w('/* Runs case k in a child; the parent judges it and writes the row. */')
    w('static void run_case(int k, const char *fn, const char *arg, const char *val, int is_status, int must_fail, const char *why);')
    w('static void call_case(int k, result *r);')
    w('')
    w('static void run_case(int k, const char *fn, const char *arg, const char *val, int is_status, int must_fail, const char *why)')
    w('{')
    w('    int fd[2];')
    w('    result r = {0};')
    w('    char verdict[600];')
    w('    g_cases++;')
    w('    fflush(NULL);')
    w('    if (pipe(fd) != 0) { CHECK(0, "pipe"); return; }')
    w('    pid_t pid = fork();')
    w('    if (pid == 0) {')
    w('        close(fd[0]);')
    w('        alarm(10);')
    w('        qkv_fail(QKV_OK, "%s", "");')
    w('        call_case(k, &r);')
    w('        snprintf(r.msg, sizeof r.msg, "%s", qkv_last_error());')
    w('        if (write(fd[1], &r, sizeof r) != (ssize_t)sizeof r) _exit(3);')
    w('        _exit(0);')
    w('    }')
    w('    close(fd[1]);')
    w('    ssize_t got = read(fd[0], &r, sizeof r);')
    w('    close(fd[0]);')
    w('    int ws = 0;')
    w('    waitpid(pid, &ws, 0);')
    w('    const char *short_fn = fn + 4; /* without qkv_ */')
    w('    size_t sl = strlen(short_fn);')
    w('    /* libqkv-plot keeps the qkv_ prefix in its messages */')
    w('    int named = (strncmp(r.msg, short_fn, sl) == 0 && (r.msg[sl] == \':\' || r.msg[sl] == \' \')) ||')
    w('                (strncmp(r.msg, fn, sl + 4) == 0 && r.msg[sl + 4] == \':\');')
    w('    if (got != (ssize_t)sizeof r || !WIFEXITED(ws) || WEXITSTATUS(ws) != 0) {')
    w('        snprintf(verdict, sizeof verdict, "CRASH (%s %d)", WIFSIGNALED(ws) ? "signal" : "exit",')
    w('                 WIFSIGNALED(ws) ? WTERMSIG(ws) : WEXITSTATUS(ws));')
    w('        CHECK(0, "%s(%s = %s): %s", fn, arg, val, verdict);')
    w('        r.msg[0] = 0;')
    w('    } else if (is_status && r.status != QKV_OK) {')
    w('        snprintf(verdict, sizeof verdict, "%s", qkv_status_name((qkv_status)r.status));')
    w('        CHECK(named, "%s(%s = %s): %s, the message does not start with %s: %s", fn, arg, val,')
    w('              verdict, short_fn, r.msg);')
    w('    } else if (is_status) {')
    w('        snprintf(verdict, sizeof verdict, "%s%s%s", must_fail ? "QKV_OK (wrong)" : "QKV_OK",')
    w('                 why[0] ? ": allowed, " : "", why);')
    w('        CHECK(!must_fail, "%s(%s = %s): returned QKV_OK", fn, arg, val);')
    w('        r.msg[0] = 0;')
    w('    } else {')
    w('        snprintf(verdict, sizeof verdict, "no crash%s", r.ret_null ? ", returns NULL" : "");')
    w('        CHECK(1, "ok");')
    w('    }')
    w('    if (strncmp(verdict, "QKV_OK (wrong)", 14) == 0 || strncmp(verdict, "CRASH", 5) == 0 ||')
    w('        (is_status && r.status != QKV_OK && !named))')
    w('        g_bad++;')
    w('    if (g_table) {')
    w('        fprintf(g_table, "| `%s` | `%s` | %s | %s | ", fn, arg, val, verdict);')
    w('        cell(r.msg);')
    w('        fputs(" |\\n", g_table);')
    w('    }')
    w('}')
    w('')
    w('#pragma GCC diagnostic ignored "-Wnonnull"')
    w('#pragma GCC diagnostic ignored "-Wunused-result"')
    w('static void call_case(int k, result *r)')
    w('{')
    w('    switch (k) {')
    for k, (name, an, label, kind, must, call, ret) in enumerate(cases):
        if kind == 'status':
            body = 'r->status = %s(%s);' % (name, call)
        elif ret == 'void':
            body = '%s(%s);' % (name, call)
        elif '*' in ret:
            body = 'r->ret_null = %s(%s) == NULL;' % (name, call)
        else:
            body = '(void)%s(%s);' % (name, call)
        w('    case %d: %s break;' % (k, body))
    w('    }')
    w('}')
    w('')
    w('int main(void)')
    w('{')
    w('    const char *tab = getenv("QKV_BAD_ARGS_TABLE");')
    w('    setup();')
    w('    g_table = tab ? fopen(tab, "w") : NULL;')
    w('    static const struct { const char *fn, *arg, *val; int status, must; const char *why; } C[] = {')
    for name, an, label, kind, must, call, ret in cases:
        why = ALLOWED.get((name, an)) or ALLOWED_ARGS.get(an) if label == 'NULL' else ''
        w('        {"%s", "%s", "%s", %d, %d, "%s"},' % (name, an, label, kind == 'status', int(must),
                                                 (why or '').replace('"', '\\"')))
    w('    };')
    w('    for (int k = 0; k < (int)(sizeof C / sizeof *C); k++)')
    w('        run_case(k, C[k].fn, C[k].arg, C[k].val, C[k].status, C[k].must, C[k].why);')
    w('    if (g_table) {')
    w('        fputs("\\n### Not tried\\n\\n| function | argument | bad value | why not |\\n|---|---|---|---|\\n", g_table);')
    for name, an, label, why in skipped:
        w('        fputs("| `%s` | `%s` | %s | %s |\\n", g_table);' % (name, an, label, why))
    w('        fclose(g_table);')
    w('    }')
    w('    fprintf(stderr, "test_bad_args: %%d cases over %d public functions (%d with a case), %%d bad\\n", g_cases, g_bad);'
      % (len(funcs), len({c[0] for c in cases})))
    w('    qkv_ctx_free(g_ctx);')
    w('    qkv_params_free(g_params);')
    w('    qkv_arena_free(g_arena);')
    w('    if (g_file) fclose(g_file);')
    w('    qkv_optim_free(g_optim);')
    w('    qkv_safetensors_close(g_st);')
    w('    qkv_tokenizer_free(g_tok);')
    w('    char cmd[128];')
    w('    snprintf(cmd, sizeof cmd, "rm -rf %s", g_dir);')
    w('    CHECK(chdir(g_cwd) == 0 && system(cmd) == 0, "removing %s", g_dir);')
    w('    return h_finish("test_bad_args");')
    w('}')
    open('tests/test_bad_args.c', 'w').write('\n'.join(out) + '\n')
    print('tests/test_bad_args.c: %d functions, %d cases, %d not tried' % (len(funcs), len(cases), len(skipped)))


if __name__ == '__main__':
    main()
