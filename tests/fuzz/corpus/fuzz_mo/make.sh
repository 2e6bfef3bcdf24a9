#!/bin/sh
# Regenerates the fuzz seeds for tests/fuzz/fuzz_mo.c with GNU msgfmt (package
# gettext): small catalogues in both byte orders, one in Latin-1, plus a
# revision 0.1 file written by tools/mo_oracle.py's layout.
set -e
cd "$(dirname "$0")"
t=$(mktemp -d)
cat >"$t/a.po" <<'PO'
msgid ""
msgstr "Content-Type: text/plain; charset=UTF-8\n"
"Plural-Forms: nplurals=2; plural=(n > 1);\n"

msgid "_Open %s"
msgstr "_Ouvrir %s"

msgctxt "menu"
msgid "File"
msgstr "Fichier"

msgid "%d file"
msgid_plural "%d files"
msgstr[0] "%d fichier"
msgstr[1] "%d fichiers"
PO
printf 'msgid ""\nmsgstr "Content-Type: text/plain; charset=ISO-8859-1\\n"\n\nmsgid "Summer"\nmsgstr "\351t\351"\n' >"$t/l.po"
msgfmt --endianness=little -o little.mo "$t/a.po"
msgfmt --endianness=big -o big.mo "$t/a.po"
msgfmt -o latin1.mo "$t/l.po"
mkdir -p "$t/o" && /usr/bin/python3 ../../../../tools/mo_oracle.py --out "$t/o" --seed 3 --cases 3
cp "$t/o/case_0002.mo" revision1.mo
rm -rf "$t"
