"""CEL parser front end: Lark (LALR) over ``cel.lark``, then conversion to :mod:`.ast` with macros.

The grammar is celpy's, extended with CEL's optional syntax (see the header of ``cel.lark``).
Macros are expanded the way cel-go's ``parser/macro.go`` does (``has``, ``all``, ``exists``,
``exists_one``, ``map``, ``filter``, the two-variable forms of ``ext.TwoVarComprehensions`` and
``cel.bind`` of ``ext.Bindings``).
"""

from __future__ import annotations

import hashlib
import pickle
import threading
from pathlib import Path
from typing import Any

import lark
from lark.exceptions import UnexpectedCharacters, UnexpectedEOF, UnexpectedInput, UnexpectedToken

from gpucluster.dra.cel import ast
from gpucluster.dra.cel.errors import CelCompileError

INT64_MIN = -(2**63)
INT64_MAX = 2**63 - 1
UINT64_MAX = 2**64 - 1

# Nesting deeper than this is rejected, as cel-go's parser does (its default limit is 250).
MAX_RECURSION_DEPTH = 250

# Lark parse-tree nodes are handled dynamically (their children are trees or tokens).
Tree = Any

_GRAMMAR = Path(__file__).with_name("cel.lark")
_parser: lark.Lark | None = None
_parser_lock = threading.Lock()

# Identifiers that cel-go's parser refuses (CEL spec "reserved words").
_RESERVED = frozenset(
    {
        "as",
        "break",
        "const",
        "continue",
        "else",
        "for",
        "function",
        "if",
        "import",
        "let",
        "loop",
        "package",
        "namespace",
        "return",
        "var",
        "void",
        "while",
        "in",
    }
)


# Lark builds the grammar's LALR tables in 0.1-1 s; the built parser is shipped next to the grammar
# (``make cel-parser`` writes it) and loads in a few ms. Its first line names the grammar's digest
# and the Lark version that built it: on any mismatch the parser is built from the grammar instead,
# so a stale file costs time, never a wrong parse (tests/test_startup.py keeps it current).
_BUILT = _GRAMMAR.with_name("cel.lark.built")
_LARK_OPTIONS: dict[str, Any] = {
    "parser": "lalr",
    "lexer": "contextual",
    "start": "expr",
    "propagate_positions": True,
    "maybe_placeholders": False,
}


def _built_header(grammar: bytes) -> bytes:
    digest = hashlib.sha256(grammar + repr(sorted(_LARK_OPTIONS.items())).encode()).hexdigest()
    return f"gpucluster-cel-parser grammar={digest} lark={lark.__version__}\n".encode()


def _build(grammar: bytes) -> lark.Lark:
    return lark.Lark(grammar.decode("utf-8"), **_LARK_OPTIONS)


def _load_or_build() -> lark.Lark:
    grammar = _GRAMMAR.read_bytes()
    try:
        with _BUILT.open("rb") as f:
            if f.readline() == _built_header(grammar):
                # Our own file, shipped in the package: as trusted as this module's code.
                return lark.Lark.load(f)
    except (OSError, EOFError, pickle.UnpicklingError, lark.exceptions.LarkError):
        pass
    return _build(grammar)


def write_built_parser(path: Path = _BUILT) -> None:
    """Build the parser from the grammar and save it where :func:`_lark` looks first."""
    grammar = _GRAMMAR.read_bytes()
    with path.open("wb") as f:
        f.write(_built_header(grammar))
        _build(grammar).save(f)


def built_parser_is_current(path: Path = _BUILT) -> bool:
    try:
        with path.open("rb") as f:
            return f.readline() == _built_header(_GRAMMAR.read_bytes())
    except OSError:
        return False


def _lark() -> lark.Lark:
    global _parser
    if _parser is None:
        with _parser_lock:
            if _parser is None:
                _parser = _load_or_build()
    return _parser


class _Parse:
    def __init__(self, text: str) -> None:
        self.text = text
        self.depth = 0

    def error(self, line: int, column: int, message: str) -> CelCompileError:
        return CelCompileError(self.text, line, column, message)

    # -- positions -------------------------------------------------------------------------
    @staticmethod
    def _pos(item: Any) -> tuple[int, int]:
        if isinstance(item, lark.Token):
            return (item.line or 1, item.column or 1)
        meta = getattr(item, "meta", None)
        if meta is not None and not getattr(meta, "empty", True):
            return (meta.line, meta.column)
        if isinstance(item, lark.Tree):
            for child in item.children:
                pos = _Parse._pos(child)
                if pos != (1, 1):
                    return pos
        return (1, 1)

    # -- conversion ------------------------------------------------------------------------
    def convert(self, tree: Tree) -> ast.Node:
        self.depth += 1
        try:
            if self.depth > MAX_RECURSION_DEPTH:
                line, col = self._pos(tree)
                raise self.error(line, col, f"expression recursion limit exceeded: {MAX_RECURSION_DEPTH}")
            method = getattr(self, "_" + str(tree.data))
            node: ast.Node = method(tree)
            return node
        finally:
            self.depth -= 1

    def _expr(self, t: Tree) -> ast.Node:
        if len(t.children) == 1:
            return self.convert(t.children[0])
        cond, a, b = t.children
        line, col = self._pos(t)
        return ast.Call(line, col, "_?_:_", None, [self.convert(cond), self.convert(a), self.convert(b)])

    def _chain(self, t: Tree, op: str) -> ast.Node:
        # Left-recursive chains (a || b || c ...) are walked iteratively.
        operands: list[Tree] = []
        node = t
        while len(node.children) == 2:
            operands.append(node.children[1])
            node = node.children[0]
        operands.append(node.children[0])
        operands.reverse()
        if len(operands) == 1:
            return self.convert(operands[0])
        # Logical operators are n-ary (cel-go flattens them too): evaluation is left to right,
        # the first false (or true) wins, and the first error is kept.
        args = [self.convert(operand) for operand in operands]
        return ast.Call(args[0].line, args[0].column, op, None, args)

    def _conditionalor(self, t: Tree) -> ast.Node:
        return self._chain(t, "_||_")

    def _conditionaland(self, t: Tree) -> ast.Node:
        return self._chain(t, "_&&_")

    _BINOPS = {
        "relation_lt": "_<_",
        "relation_le": "_<=_",
        "relation_gt": "_>_",
        "relation_ge": "_>=_",
        "relation_eq": "_==_",
        "relation_ne": "_!=_",
        "relation_in": "@in",
        "addition_add": "_+_",
        "addition_sub": "_-_",
        "multiplication_mul": "_*_",
        "multiplication_div": "_/_",
        "multiplication_mod": "_%_",
    }

    def _binary(self, t: Tree) -> ast.Node:
        # relation: [relation_op(relation)] addition  -- walk the left spine iteratively.
        steps: list[tuple[str, Tree]] = []
        node = t
        while len(node.children) == 2:
            op_tree, right = node.children
            steps.append((str(op_tree.data), right))
            node = op_tree.children[0]
        result = self.convert(node.children[0])
        for op, right in reversed(steps):
            result = ast.Call(result.line, result.column, self._BINOPS[op], None, [result, self.convert(right)])
        return result

    _relation = _binary
    _addition = _binary
    _multiplication = _binary

    def _unary(self, t: Tree) -> ast.Node:
        if len(t.children) == 1:
            return self.convert(t.children[0])
        op, operand = t.children
        line, col = self._pos(t)
        inner = self.convert(operand)
        return ast.Call(line, col, "!_" if str(op.data) == "unary_not" else "-_", None, [inner])

    def _member(self, t: Tree) -> ast.Node:
        return self.convert(t.children[0])

    def _primary(self, t: Tree) -> ast.Node:
        return self.convert(t.children[0])

    def _paren_expr(self, t: Tree) -> ast.Node:
        return self.convert(t.children[0])

    def _ident_name(self, tok: Any) -> str:
        name = str(tok)
        if name in _RESERVED:
            raise self.error(tok.line or 1, tok.column or 1, f"reserved identifier: {name}")
        return name

    def _member_dot(self, t: Tree) -> ast.Node:
        operand, name = t.children
        line, col = self._pos(name)
        return ast.Select(line, col, self.convert(operand), self._ident_name(name))

    def _member_dot_opt(self, t: Tree) -> ast.Node:
        operand, name = t.children
        line, col = self._pos(name)
        return ast.Select(line, col, self.convert(operand), self._ident_name(name), optional=True)

    def _member_index(self, t: Tree) -> ast.Node:
        operand, index = t.children
        line, col = self._pos(index)
        return ast.Index(line, col, self.convert(operand), self.convert(index))

    def _member_index_opt(self, t: Tree) -> ast.Node:
        operand, index = t.children
        line, col = self._pos(index)
        return ast.Index(line, col, self.convert(operand), self.convert(index), optional=True)

    def _args(self, children: list[Any]) -> list[ast.Node]:
        if not children:
            return []
        exprlist = children[0]
        return [self.convert(c) for c in exprlist.children]

    def _member_dot_arg(self, t: Tree) -> ast.Node:
        operand, name = t.children[0], t.children[1]
        line, col = self._pos(name)
        target = self.convert(operand)
        return self._call(line, col, str(name), target, self._args(t.children[2:]))

    def _ident_arg(self, t: Tree) -> ast.Node:
        name = t.children[0]
        line, col = self._pos(name)
        return self._call(line, col, str(name), None, self._args(t.children[1:]))

    def _dot_ident_arg(self, t: Tree) -> ast.Node:
        return self._ident_arg(t)

    def _ident(self, t: Tree) -> ast.Node:
        name = t.children[0]
        line, col = self._pos(name)
        return ast.Ident(line, col, self._ident_name(name))

    _dot_ident = _ident

    def _member_object(self, t: Tree) -> ast.Node:
        operand = self.convert(t.children[0])
        line, col = self._pos(t)
        name = _qualified_name(operand) or "<expression>"
        fields: list[tuple[str, ast.Node]] = []
        for fi in t.children[1].children if len(t.children) > 1 else []:
            fields.append((str(fi.children[0]), self.convert(fi.children[1])))
        return ast.StructLit(line, col, name, fields)

    def _list_lit(self, t: Tree) -> ast.Node:
        line, col = self._pos(t)
        elements: list[ast.Node] = []
        optional: set[int] = set()
        if t.children:
            for i, item in enumerate(t.children[0].children):
                if str(item.data) == "opt_elem":
                    optional.add(i)
                    elements.append(self.convert(item.children[0]))
                else:
                    elements.append(self.convert(item))
        return ast.ListLit(line, col, elements, frozenset(optional))

    def _map_lit(self, t: Tree) -> ast.Node:
        line, col = self._pos(t)
        entries: list[tuple[ast.Node, ast.Node, bool]] = []
        if t.children:
            for item in t.children[0].children:
                key, value = item.children
                entries.append((self.convert(key), self.convert(value), str(item.data) == "opt_mapinit"))
        return ast.MapLit(line, col, entries)

    def _literal(self, t: Tree) -> ast.Node:
        tok: Any = t.children[0]
        line, col = self._pos(tok)
        text = str(tok)
        kind = tok.type
        value: Any
        if kind == "BOOL_LIT":
            value = text == "true"
        elif kind == "NULL_LIT":
            value = None
        elif kind == "INT_LIT":
            neg = text.startswith("-")
            digits = text[1:] if neg else text
            n = int(digits, 16) if digits[:2] in ("0x", "0X") else int(digits)
            value = -n if neg else n
            if not INT64_MIN <= value <= INT64_MAX:
                raise self.error(line, col, "invalid int literal")
        elif kind == "UINT_LIT":
            digits = text[:-1]
            n = int(digits, 16) if digits[:2] in ("0x", "0X") else int(digits)
            if n > UINT64_MAX:
                raise self.error(line, col, "invalid uint literal")
            from gpucluster.dra.cel.values import Uint

            value = Uint(n)
        elif kind == "FLOAT_LIT":
            value = float(text)
            if value in (float("inf"), float("-inf")):
                raise self.error(line, col, "invalid double literal")
        else:
            try:
                value = decode_string(text)
            except ValueError as exc:
                raise self.error(line, col, f"Syntax error: {exc}") from None
        return ast.Const(line, col, value)

    # -- macros ----------------------------------------------------------------------------
    def _simple_name(self, node: ast.Node, macro: str) -> str:
        if not isinstance(node, ast.Ident):
            raise self.error(node.line, node.column, f"{macro}() variable name must be a simple identifier")
        return node.name

    def _call(self, line: int, col: int, name: str, target: ast.Node | None, args: list[ast.Node]) -> ast.Node:
        n = len(args)
        if target is None:
            if name == "has" and n == 1:
                arg = args[0]
                if isinstance(arg, ast.Select) and not arg.optional:
                    return ast.Has(line, col, arg.operand, arg.field)
                raise self.error(arg.line, arg.column, "invalid argument to has() macro")
            return ast.Call(line, col, name, None, args)
        if name in ("all", "exists", "exists_one", "existsOne") and n in (2, 3):
            macro = "exists_one" if name == "existsOne" else name
            if name == "existsOne" and n == 2:
                return ast.Call(line, col, name, target, args)
            var = self._simple_name(args[0], name)
            var2 = self._simple_name(args[1], name) if n == 3 else None
            self._check_vars(var, var2, args[0])
            return ast.Comprehension(line, col, macro, target, var, var2, args[-1])
        if name == "map" and n in (2, 3):
            var = self._simple_name(args[0], name)
            if n == 2:
                return ast.Comprehension(line, col, "map", target, var, None, args[1])
            return ast.Comprehension(line, col, "map", target, var, None, args[2], filter=args[1])
        if name == "filter" and n == 2:
            var = self._simple_name(args[0], name)
            return ast.Comprehension(line, col, "filter", target, var, None, args[1])
        if name in ("transformList", "transformMap") and n in (3, 4):
            var = self._simple_name(args[0], name)
            var2 = self._simple_name(args[1], name)
            self._check_vars(var, var2, args[0])
            flt = args[2] if n == 4 else None
            return ast.Comprehension(line, col, name, target, var, var2, args[-1], filter=flt)
        if name in ("optMap", "optFlatMap") and n == 2:
            var = self._simple_name(args[0], name)
            return ast.Comprehension(line, col, name, target, var, None, args[1])
        if name == "bind" and n == 3 and isinstance(target, ast.Ident) and target.name == "cel":
            var = self._simple_name(args[0], "cel.bind")
            return ast.Bind(line, col, var, args[1], args[2])
        return ast.Call(line, col, name, target, args)

    def _check_vars(self, var: str, var2: str | None, at: ast.Node) -> None:
        if var2 is not None and var == var2:
            raise self.error(at.line, at.column, f"duplicate variable name: {var}")
        for v in (var, var2):
            if v in ("__result__", "@result"):
                raise self.error(at.line, at.column, f"iteration variable overwrites accumulator variable: {v}")


def _qualified_name(node: ast.Node) -> str | None:
    if isinstance(node, ast.Ident):
        return node.name
    if isinstance(node, ast.Select) and not node.optional:
        prefix = _qualified_name(node.operand)
        return None if prefix is None else f"{prefix}.{node.field}"
    return None


qualified_name = _qualified_name

_SIMPLE_ESCAPES = {
    "a": "\a",
    "b": "\b",
    "f": "\f",
    "n": "\n",
    "r": "\r",
    "t": "\t",
    "v": "\v",
    "\\": "\\",
    "'": "'",
    '"': '"',
    "`": "`",
    "?": "?",
}


def decode_string(text: str) -> str | bytes:
    """Decode a CEL string or bytes literal token (with prefix and quotes)."""
    i = 0
    is_bytes = is_raw = False
    while text[i] in "bBrR":
        if text[i] in "bB":
            is_bytes = True
        else:
            is_raw = True
        i += 1
    body = text[i:]
    quote = 3 if body[:3] in ('"""', "'''") else 1
    body = body[quote:-quote]
    if is_raw:
        return body.encode("utf-8") if is_bytes else body
    out_chars: list[str] = []
    out_bytes = bytearray()

    def put_text(s: str) -> None:
        if is_bytes:
            out_bytes.extend(s.encode("utf-8"))
        else:
            out_chars.append(s)

    def put_code(code: int, raw_byte: bool) -> None:
        if is_bytes and raw_byte:
            out_bytes.append(code)
        else:
            if 0xD800 <= code <= 0xDFFF or code > 0x10FFFF:
                raise ValueError(f"invalid unicode code point in escape sequence: {code:#x}")
            put_text(chr(code))

    n = len(body)
    j = 0
    while j < n:
        c = body[j]
        if c != "\\":
            k = body.find("\\", j)
            k = n if k < 0 else k
            put_text(body[j:k])
            j = k
            continue
        if j + 1 >= n:
            raise ValueError("invalid escape sequence: trailing backslash")
        e = body[j + 1]
        if e in _SIMPLE_ESCAPES:
            put_text(_SIMPLE_ESCAPES[e])
            j += 2
        elif e in "xX":
            digits = body[j + 2 : j + 4]
            if len(digits) != 2 or not all(ch in "0123456789abcdefABCDEF" for ch in digits):
                raise ValueError("invalid \\x escape sequence")
            put_code(int(digits, 16), True)
            j += 4
        elif e in "uU":
            width = 4 if e == "u" else 8
            digits = body[j + 2 : j + 2 + width]
            if len(digits) != width or not all(ch in "0123456789abcdefABCDEF" for ch in digits):
                raise ValueError(f"invalid \\{e} escape sequence")
            put_code(int(digits, 16), False)
            j += 2 + width
        elif e in "0123":
            digits = body[j + 1 : j + 4]
            if len(digits) != 3 or not all(ch in "01234567" for ch in digits):
                raise ValueError("invalid octal escape sequence")
            put_code(int(digits, 8), True)
            j += 4
        else:
            raise ValueError(f"invalid escape sequence: \\{e}")
    return bytes(out_bytes) if is_bytes else "".join(out_chars)


def _check_depth(text: str, root: ast.Node) -> None:
    stack: list[tuple[ast.Node, int]] = [(root, 1)]
    while stack:
        node, depth = stack.pop()
        if depth > MAX_RECURSION_DEPTH:
            raise CelCompileError(
                text, node.line, node.column, f"expression recursion limit exceeded: {MAX_RECURSION_DEPTH}"
            )
        stack.extend((child, depth + 1) for child in ast.children(node))


def _describe(exc: UnexpectedInput, text: str) -> str:
    if isinstance(exc, UnexpectedCharacters):
        pos = exc.pos_in_stream or 0
        ch = text[pos] if pos < len(text) else ""
        return f"Syntax error: token recognition error at: '{ch}'"
    if isinstance(exc, UnexpectedEOF):
        return "Syntax error: mismatched input '<EOF>'"
    if isinstance(exc, UnexpectedToken):
        tok = exc.token
        if tok.type == "$END":
            return "Syntax error: mismatched input '<EOF>'"
        return f"Syntax error: mismatched input '{tok}'"
    return "Syntax error"


def parse(text: str) -> ast.Node:
    """Parse a CEL expression into an AST with macros expanded; raises CelCompileError."""
    try:
        tree = _lark().parse(text)
    except UnexpectedInput as exc:
        line = getattr(exc, "line", 1)
        column = getattr(exc, "column", 1)
        if (isinstance(exc, UnexpectedToken) and exc.token.type == "$END") or line in (None, -1):
            lines = text.split("\n")
            line, column = len(lines), len(lines[-1]) + 1
        raise CelCompileError(text, int(line or 1), int(column or 1), _describe(exc, text)) from None
    except lark.exceptions.LarkError as exc:
        raise CelCompileError(text, 1, 1, f"Syntax error: {exc}") from None
    parser = _Parse(text)
    try:
        node = parser.convert(tree)
        _check_depth(text, node)
        return node
    except RecursionError:
        raise CelCompileError(text, 1, 1, f"expression recursion limit exceeded: {MAX_RECURSION_DEPTH}") from None
