"""docs/api.md is complete against include/fa2.h (a CPU test, no library needed).

Checked: every public function, enum value and limit macro is named on the page; every
field of every public struct is named in that struct's section; and every status a
function's header comment lists is named in that function's row of the "Functions"
table (directly, or through a row it defers to with "those of `fa2_x`").
"""
import os
import re
import sys
import unittest

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
HEADER = os.path.join(REPO, "include", "fa2.h")
API_MD = os.path.join(REPO, "docs", "api.md")


def read(path):
    with open(path, encoding="utf-8") as f:
        return f.read()


def strip_comments(text):
    return re.sub(r"/\*.*?\*/", "", text, flags=re.S)


def expand_braces(word):
    """`{q,k}_{batch,seq}_stride` -> q_batch_stride, q_seq_stride, k_batch_stride, ..."""
    m = re.search(r"\{([^{}]*)\}", word)
    if not m:
        return [word]
    return [w for alt in m.group(1).split(",")
            for w in expand_braces(word[:m.start()] + alt + word[m.end():])]


def words(text):
    """Every identifier on a markdown page, brace patterns in backticks expanded."""
    out = set(re.findall(r"\w+", text))
    for code in re.findall(r"`([^`]*)`", text):
        for token in re.findall(r"[\w{},]+", code):
            if "{" in token:
                out.update(expand_braces(token))
    return out


def functions(header):
    """{name: its doc comment} for every FA2_API function."""
    out = {}
    for m in re.finditer(r"(/\*(?:(?!\*/).)*\*/)\s*FA2_API[^;(]*?\b(fa2_\w+)\(", header, re.S):
        out[m.group(2)] = m.group(1)
    for name in re.findall(r"FA2_API[^;(]*?\b(fa2_\w+)\(", header):
        out.setdefault(name, "")
    return out


def structs(header):
    """{struct name: [field names]} of every public struct."""
    out = {}
    for name, body in re.findall(r"typedef struct (\w+) \{(.*?)\} \1;", header, re.S):
        fields = []
        for decl in strip_comments(body).split(";"):
            decl = decl.strip()
            if not decl:
                continue
            decl = re.sub(r"^(const\s+)?[\w]+(\s+\w+_t(?=\s))?\s*", "", decl)
            fields += [n.strip().lstrip("*").strip() for n in decl.split(",")]
        out[name] = [f for f in fields if f]
    return out


def enum_values(header):
    return re.findall(r"^\s+(FA2_[A-Z0-9_]+)\s*=", strip_comments(header), re.M)


def section(page, title):
    """The text of the section whose heading line contains `title`, to the next heading
    of the same or a higher level."""
    m = re.search(r"^(#+) .*" + re.escape(title) + r".*$", page, re.M)
    if not m:
        return ""
    level = len(m.group(1))
    end = re.search(r"^#{1,%d} " % level, page[m.end():], re.M)
    return page[m.end():m.end() + end.start()] if end else page[m.end():]


def table_rows(page):
    """The rows of the Functions table."""
    return [line for line in section(page, "Functions").splitlines() if line.startswith("| `")]


class ApiDocs(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.header = read(HEADER)
        cls.page = read(API_MD)
        cls.words = words(cls.page)

    def test_every_function_is_documented(self):
        missing = [f for f in functions(self.header) if f not in self.words]
        self.assertEqual(missing, [], "functions of fa2.h missing from docs/api.md")

    def test_every_enum_value_and_limit_is_documented(self):
        names = enum_values(self.header) + re.findall(r"#define (FA2_M(?:AX|IN)_\w+)",
                                                     self.header)
        missing = [n for n in names if n not in self.words]
        self.assertEqual(missing, [], "enum values / limits of fa2.h missing from docs/api.md")

    def test_every_struct_field_is_in_its_section(self):
        for name, fields in structs(self.header).items():
            text = section(self.page, "`%s`" % name)
            self.assertTrue(text, f"docs/api.md has no section for {name}")
            have = words(text)
            missing = [f for f in fields if f not in have]
            self.assertEqual(missing, [], f"fields of {name} missing from its section")

    def test_every_status_of_a_function_is_in_its_row(self):
        rows = table_rows(self.page)
        funcs = functions(self.header)

        def row_of(name):
            found = [r for r in rows if re.search(r"\b%s\(" % name, r)]
            return found[0] if found else None

        def statuses_in(row, seen=()):
            got = set(re.findall(r"\b(?:FA2_ERROR_)?([A-Z][A-Z_]+[A-Z])\b", row))
            for other in re.findall(r"those of `(fa2_\w+)`", row):
                if other not in seen and row_of(other):
                    got |= statuses_in(row_of(other), seen + (other,))
            return got

        for name, doc in funcs.items():
            listed = set(re.findall(r"FA2_ERROR_([A-Z_]+[A-Z])", doc))
            if not listed:
                continue
            row = row_of(name)
            self.assertIsNotNone(row, f"{name} has no row in the Functions table")
            missing = sorted(listed - statuses_in(row))
            self.assertEqual(missing, [], f"{name}: statuses its header comment lists "
                             "that its row of docs/api.md does not")


if __name__ == "__main__":
    sys.exit(0 if unittest.main(exit=False, verbosity=2).result.wasSuccessful() else 1)
