#!/bin/sh
# test_names.sh BUILD: the public functions follow the naming rules of
# docs/core.md ("Names"), checked on the declarations of include/ as the
# compiler lists them (gcc -aux-info):
#   qkv_<thing>_new     allocates: takes a qkv_<thing> ** out, and
#                       qkv_<thing>_free exists (or an arena, its first
#                       argument, owns the result: qkv_tensor_new)
#   qkv_<thing>_init    fills the caller's struct: its first argument is a
#                       pointer to it, never a ** out (qkv_init_*: nn.init's
#                       initializers, which fill a tensor)
#   ..._default         returns a struct named by the function: qkv_T_default
#                       gives a qkv_T; qkv_<thing>_<variant>_opts_default a
#                       qkv_<thing>_opts
#   QKV_DEPRECATED("qkv_new_name") old names: exempt, and the new name is
#                       declared
# Each name that breaks a rule is printed.
root=$(cd "$(dirname "$0")/.." && pwd)
tmp=$(mktemp -d /tmp/qkv_names_XXXXXX) || exit 1
trap 'rm -rf "$tmp"' EXIT
echo '#include "qkv.h"' > "$tmp/all.c"
for h in "$root"/include/qkv/*.h; do echo "#include \"qkv/${h##*/}\""; done >> "$tmp/all.c"
if ! gcc -std=c11 -I"$root/include" -fsyntax-only -aux-info "$tmp/aux.txt" "$tmp/all.c"; then
    echo "FAIL tests/test_names.sh: the headers do not compile"; echo "test_names: 0 passed, 1 failed"; exit 1
fi
grep '^/\* [^ ]*include/qkv' "$tmp/aux.txt" | sed 's/^[^*]*\*[^*]*\*\/ //' > "$tmp/decl"
cat "$root"/include/qkv.h "$root"/include/qkv/*.h | tr '\n' ' ' | sed 's/;/;\n/g' |
    sed -n 's/.*QKV_DEPRECATED("\(qkv_[a-z0-9_]*\)")[^(]* \(qkv_[a-z0-9_]*\)(.*/\2 \1/p' > "$tmp/deprecated"
exec /usr/bin/python3 - "$tmp/decl" "$tmp/deprecated" <<'PY'
import re, sys
decls = {}
for line in open(sys.argv[1]):
    m = re.match(r'^extern (.*?)\b(qkv_\w+) \((.*)\);', line.strip())
    if m:
        decls[m.group(2)] = (m.group(1).strip(), [a.strip() for a in m.group(3).split(',')])
old = dict(l.split() for l in open(sys.argv[2]))
passed = failed = 0
def check(ok, msg):
    global passed, failed
    if ok: passed += 1
    else:
        failed += 1
        print('FAIL tests/test_names.sh: ' + msg)
check(len(decls) > 300, '%d declarations found' % len(decls))
check(len(old) > 0, 'no QKV_DEPRECATED names found')
for name, new in sorted(old.items()):
    check(name in decls, '%s is marked deprecated but not declared' % name)
    check(new in decls and new not in old, '%s: its new name %s is not declared' % (name, new))
for name, (ret, args) in sorted(decls.items()):
    if name in old:
        continue
    base = lambda a: re.sub(r'\bconst\b|\*', '', a).strip()
    if name.endswith('_new'):
        outs = [base(a) for a in args if a.count('*') == 2 and name.startswith(base(a))]
        check(outs != [], '%s: a _new takes a qkv_<thing> ** out' % name)
        arena = base(args[0]) == 'qkv_arena'  # the arena owns what it gives (qkv_tensor_new)
        check(arena or any(o + '_free' in decls for o in outs), '%s: no %s_free' % (name, outs[0] if outs else '?'))
    if (name.endswith('_init') or '_init_' in name) and not name.startswith('qkv_init_'):
        check(args[0].count('*') == 1 and base(args[0]) != 'void',
              '%s: an _init fills the struct its first argument points to (%s); one that allocates is a _new'
              % (name, args[0]))
    if name.endswith('_default') and ret not in ('qkv_status', 'void') and '*' not in ret:
        ok = name == ret + '_default' or (ret.endswith('_opts') and name.endswith('_opts_default') and
                                          name.startswith(ret[:-len('opts')]))
        check(ok, '%s returns a %s: name it %s_default (a variant: before _opts_default)' % (name, ret, ret))
print('test_names: %d passed, %d failed' % (passed, failed))
sys.exit(failed != 0)
PY
