"""The CEL language and libraries of the Kubernetes environment, table-driven (incl. error cases).

Expected values follow cel-go / Kubernetes (``k8s.io/apiserver`` libraries); where the C++ oracle
used in test_differential.py disagrees with Go, the Go behaviour is asserted here.
"""

from __future__ import annotations

from typing import Any

import pytest

from events.quantity import Quantity
from services.dra.cel import CelCompileError, CelRuntimeError, compile_any, prepare_device
from services.dra.cel.values import Semver, Uint


class Err:
    """Expect a runtime error whose message contains ``text``."""

    def __init__(self, text: str) -> None:
        self.text = text

    def __repr__(self) -> str:
        return f"Err({self.text!r})"


class CompileErr(Err):
    """Expect a compile error whose message contains ``text``."""


DEVICE = prepare_device("d", {}, {})
ERR = "(1 / 0 > 0)"  # an expression that is a runtime error

CASES: list[tuple[str, Any]] = [
    # -- error absorption (commutative, as the CEL spec)
    (f"false && {ERR}", False),
    (f"{ERR} && false", False),
    (f"true || {ERR}", True),
    (f"{ERR} || true", True),
    (f"{ERR} && true", Err("division by zero")),
    (f"true && {ERR}", Err("division by zero")),
    (f"{ERR} || false", Err("division by zero")),
    (f"false || {ERR}", Err("division by zero")),
    ("dyn(1) && false", False),
    (f"false && {ERR} && true", False),
    (f"{ERR} && true && false", False),
    (f"true && {ERR} && true", Err("division by zero")),
    (f"true && ({ERR} && true) && {ERR.replace('1 / 0', '2 % 0')}", Err("division by zero")),
    ("dyn(1) && true && false", False),
    ("dyn(1) && true && true", Err("no such overload")),
    (f"{ERR} || false || true", True),
    (f"false || {ERR} || false", Err("division by zero")),
    ("false || false || dyn('x')", Err("no such overload")),
    ("true && true && true && true", True),
    ("dyn(1) && true", Err("no such overload")),
    ("true ? 1 : 1 / 0", 1),
    (f"{ERR} ? 1 : 2", Err("division by zero")),
    ("dyn('a') ? 1 : 2", Err("no such overload")),
    (f"[{ERR}, false].exists(x, x)", Err("division by zero")),
    ("[0, 1].all(x, 1 / x > 0)", Err("division by zero")),
    ("[0, -1].all(x, 1 / x > 0)", False),
    ("[0, 1].exists(x, 1 / x > 0)", True),
    ("[1, 0].exists(x, 1 / x < 0)", Err("division by zero")),
    # -- heterogeneous equality
    ("dyn(1) == 1.0", True),
    ("dyn(1) == 1u", True),
    ("dyn(1u) == 1.0", True),
    ("true == dyn(1)", False),
    ("dyn(true) == 1", False),
    ("dyn(0) == false", False),
    ("dyn('1') == 1", False),
    ("dyn(null) == 0", False),
    ("null == null", True),
    ("[1, 2] == [1, 2]", True),
    ("dyn([1]) == dyn([1.0])", True),
    ("{'a': 1} == {'a': 1}", True),
    ("dyn({'a': 1}) == dyn({'a': 1.0})", True),
    ("dyn({'a': 1}) == dyn({'b': 1})", False),
    ("0.0 / 0.0 == 0.0 / 0.0", False),
    ("dyn(9223372036854775807) == 9223372036854775808.0", True),  # cel-go compares as double
    ("1 == 1.0", CompileErr("found no matching overload for '_==_' applied to '(int, double)'")),
    ("'a' == 1", CompileErr("no matching overload")),
    ("dyn(1) in [1.0, 2.0]", True),
    ("dyn(true) in [1, 2]", False),
    # -- ordering (cross-type numeric comparisons are enabled in Kubernetes)
    ("1 < 1.5", True),
    ("2u > 1", True),
    ("1.0 <= 1", True),
    ("'a' < 'b'", True),
    ("b'a' < b'b'", True),
    ("false < true", True),
    ("dyn(1) < 'a'", Err("no such overload")),
    ("0.0 / 0.0 < 1.0", Err("NaN values cannot be ordered")),
    ("1 < 'a'", CompileErr("no matching overload")),
    # -- integer arithmetic and overflow
    ("9223372036854775807 + 1", Err("integer overflow")),
    ("-9223372036854775808 - 1", Err("integer overflow")),
    ("4611686018427387904 * 2", Err("integer overflow")),
    ("-(-9223372036854775807 - 1)", Err("integer overflow")),
    ("-9223372036854775808 / -1", Err("integer overflow")),
    ("-9223372036854775808 % -1", Err("integer overflow")),
    ("-9223372036854775808", -(2**63)),
    ("9223372036854775808", CompileErr("invalid int literal")),
    ("7 / -2", -3),
    ("-7 / 2", -3),
    ("-7 % 3", -1),
    ("7 % -3", 1),
    ("5 / 0", Err("division by zero")),
    ("5 % 0", Err("modulus by zero")),
    ("0u - 1u", Err("unsigned integer overflow")),
    ("18446744073709551615u + 1u", Err("unsigned integer overflow")),
    ("5u / 0u", Err("division by zero")),
    ("1.0 / 0.0", float("inf")),
    ("2.5 * 2.0", 5.0),
    ("1 + 1u", CompileErr("no matching overload")),
    # -- conversions
    ("int('42')", 42),
    ("int(' 42')", Err("type conversion error")),
    ("int('4.2')", Err("type conversion error")),
    ("int(4.9)", 4),
    ("int(-4.9)", -4),
    ("int(1e19)", Err("integer overflow")),
    ("int(2u)", 2),
    ("uint(-1)", Err("unsigned integer overflow")),
    ("uint('+1')", Err("type conversion error")),
    ("double('1e3')", 1000.0),
    ("double('abc')", Err("type conversion error")),
    ("string(1.5)", "1.5"),
    ("string(100.0)", "100"),
    ("string(1e6)", "1e+06"),
    ("string(123456.0)", "123456"),
    ("string(0.0001)", "0.0001"),
    ("string(0.00001)", "1e-05"),
    ("string(true)", "true"),
    ("string(42u)", "42"),
    ("string(b'abc')", "abc"),
    ("string(b'\\xff')", Err("invalid UTF-8")),
    ("bytes('abc')", b"abc"),
    ("bool('true')", True),
    ("bool('T')", True),
    ("bool('yes')", Err("type conversion error")),
    ("type(1) == int", True),
    ("type(1u) == uint", True),
    ("type('a') == string", True),
    ("type(null) == null_type", True),
    ("type(quantity('1')) == type(quantity('2'))", True),
    ("type(1) == type(1.0)", False),
    # -- literals
    ("0x1F", 31),
    ("0x10u", Uint(16)),
    (".5", 0.5),
    ("1e3", 1000.0),
    ('"\\x41\\101\\u0041\\U00000041"', "AAAA"),
    ('r"\\n"', "\\n"),
    ("'''multi\nline'''", "multi\nline"),
    ('b"\\xff"', b"\xff"),
    ("'a' // comment\n + 'b'", "ab"),
    ("[1, 'a']", CompileErr("expected type 'int' but found 'string'")),
    ("{'a': 1, 'b': 'x'}", CompileErr("expected type 'int' but found 'string'")),
    ("{'a': 1, 'a': 2}", Err("repeated key")),
    # -- size, in, index
    ("size('héllo')", 5),
    ("'héllo'.size()", 5),
    ("size(b'ab')", 2),
    ("size([1, 2, 3])", 3),
    ("{'a': 1}.size()", 1),
    ("'a' in {'a': 1}", True),
    ("2 in [1, 2]", True),
    ("[1, 2][1]", 2),
    ("[1, 2][2]", Err("index out of bounds: 2")),
    ("[1, 2][-1]", Err("index out of bounds: -1")),
    ("dyn([1, 2])[1u]", 2),
    ("dyn([1, 2])[1.5]", Err("unsupported index")),
    ("[1, 2][1u]", CompileErr("no matching overload for '_[_]'")),
    ("{'a': 1}['b']", Err("no such key: b")),
    ("{'a': 1}.b", Err("no such key: b")),
    ("{1: 'x'}[1]", "x"),
    ("dyn({1: 'x'})[1.0]", "x"),
    ("dyn({1: 'x'})[true]", Err("no such key: true")),
    ("has({'a': 1}.a)", True),
    ("has({'a': 1}.b)", False),
    ("'abc'[0]", CompileErr("no matching overload for '_[_]'")),
    # -- string functions (cel-go strings extension v2)
    ("'abc'.contains('b')", True),
    ("'abc'.startsWith('ab')", True),
    ("'abc'.endsWith('bc')", True),
    ("'abc'.matches('b')", True),
    ("'abc'.matches('^b')", False),
    ("matches('abc', 'c$')", True),
    ("'x'.matches('[')", CompileErr("invalid matches argument")),
    ("dyn('x').matches(dyn('['))", Err("error parsing regexp: missing closing ]: `[`")),
    ("'TacoCÆt Xii'.lowerAscii()", "tacocÆt xii"),
    ("'TacoCÆt Xii'.upperAscii()", "TACOCÆT XII"),
    ("'hello'.charAt(4)", "o"),
    ("'hello'.charAt(5)", ""),
    ("'hello'.charAt(-1)", Err("index out of range")),
    ("'hello mellow'.indexOf('')", 0),
    ("'hello mellow'.indexOf('ello', 2)", 7),
    ("'hello mellow'.indexOf('ello', 20)", -1),
    ("'hello mellow'.indexOf('ello', -1)", Err("index out of range")),
    ("'hello mellow'.lastIndexOf('')", 12),
    ("'hello mellow'.lastIndexOf('ello')", 7),
    ("'hello mellow'.lastIndexOf('ello', 6)", 1),
    ("'hello mellow'.lastIndexOf('ello', 20)", -1),
    ("'hello hello'.replace('he', 'we')", "wello wello"),
    ("'hello hello'.replace('he', 'we', 1)", "wello hello"),
    ("'hello hello'.replace('he', 'we', 0)", "hello hello"),
    ("'hello hello'.replace('', '_')", "_h_e_l_l_o_ _h_e_l_l_o_"),
    ("'hello hello hello'.split(' ')", ["hello", "hello", "hello"]),
    ("'hello hello hello'.split(' ', 0)", []),
    ("'hello hello hello'.split(' ', 1)", ["hello hello hello"]),
    ("'hello hello hello'.split(' ', 2)", ["hello", "hello hello"]),
    ("'tacocat'.substring(4)", "cat"),
    ("'tacocat'.substring(0, 4)", "taco"),
    ("'tacocat'.substring(0, 7)", "tacocat"),
    ("'tacocat'.substring(-1)", Err("index out of range")),
    ("'tacocat'.substring(2, 1)", Err("invalid substring range")),
    ("'  \\ttrim\\n    '.trim()", "trim"),
    ("['hello', 'mellow'].join()", "hellomellow"),
    ("['hello', 'mellow'].join(' ')", "hello mellow"),
    ("strings.quote('a\"b\\n')", '"a\\"b\\n"'),
    ("'abc-123'.find('[0-9]+')", "123"),
    ("'a1b22c333'.findAll('[0-9]+')", ["1", "22", "333"]),
    ("'a1b22c333'.findAll('[0-9]+', 2)", ["1", "22"]),
    # -- quantity library
    ("quantity('1Gi') == quantity('1024Mi')", True),
    ("quantity('1G') == quantity('1Gi')", False),
    ("quantity('200M').compareTo(quantity('0.2G'))", 0),
    ("quantity('50M').compareTo(quantity('50Mi'))", -1),
    ("quantity('50Mi').compareTo(quantity('50M'))", 1),
    ("quantity('150Mi').isGreaterThan(quantity('100Mi'))", True),
    ("quantity('50M').isLessThan(quantity('100M'))", True),
    ("quantity('200K')", Err("unable to parse quantity's suffix")),
    ("quantity('Three')", Err("quantities must match")),
    ("isQuantity('1.3G')", True),
    ("isQuantity('200K')", False),
    ("quantity('50k').isInteger()", True),
    ("quantity('500m').isInteger()", False),
    ("quantity('9999999999999999999999999999999999999G').isInteger()", False),
    (
        "quantity('9999999999999999999999999999999999999G').asInteger()",
        Err("cannot convert value to integer"),
    ),
    ("quantity('50k').asInteger()", 50000),
    ("quantity('50k').sub(20000).asApproximateFloat()", 30000.0),
    ("quantity('50k').add(quantity('20k')) == quantity('70k')", True),
    ("quantity('50k').add(20) == quantity('50020')", True),
    ("quantity('50k').sub(quantity('20k')) == quantity('30k')", True),
    ("quantity('50k').add(20).sub(quantity('100k')).sub(-50000) == quantity('20')", True),
    ("quantity('-3').sign()", -1),
    ("quantity('0').sign()", 0),
    ("quantity('1Gi') == 1", CompileErr("no matching overload")),
    ("dyn(quantity('1')) == 1", Err("no such overload")),
    ("dyn(1) == quantity('1')", False),
    ("dyn(quantity('1')) != 'a'", True),
    ("quantity('1') < quantity('2')", CompileErr("no matching overload")),
    # -- semver library
    ("semver('1.2.3').major()", 1),
    ("semver('1.2.3').minor()", 2),
    ("semver('1.2.3').patch()", 3),
    ("semver('1.2.3') == semver('1.2.3+build')", True),
    ("semver('1.0.0-alpha').isLessThan(semver('1.0.0'))", True),
    ("semver('1.0.0-alpha.1').isLessThan(semver('1.0.0-alpha.beta'))", True),
    ("semver('1.0.0-2').isLessThan(semver('1.0.0-10'))", True),
    ("semver('1.0.0-alpha').isLessThan(semver('1.0.0-alpha.1'))", True),
    ("semver('1.10.0').compareTo(semver('1.9.0'))", 1),
    ("semver('2.0.0').isGreaterThan(semver('1.99.99'))", True),
    ("semver('1.2')", Err("No Major.Minor.Patch elements found")),
    ("semver('01.2.3')", Err("leading zeroes")),
    ("semver('1.2.3-01')", Err("Numeric PreRelease version must not contain leading zeroes")),
    ("semver('v1.2.3')", Err("Invalid character(s) found in major number")),
    ("semver('v1.2', true) == semver('1.2.0')", True),
    ("semver('v01.02.03', true) == semver('1.2.3')", True),
    ("semver('1-beta', true)", Err("short version cannot contain PreRelease/Build meta data")),
    ("isSemver('1.2.3')", True),
    ("isSemver('1.2')", False),
    ("isSemver('v1.2', true)", True),
    ("semver('1.0.0') == dyn('1.0.0')", Err("no such overload")),
    ("semver('1.0.0').isLessThan(quantity('1'))", CompileErr("no matching overload")),
    # -- optional types
    ("{'a': 1}.?b.orValue(5)", 5),
    ("{'a': 1}.?a.orValue(5)", 1),
    ("{'a': 1}.?a.orValue(1 / 0)", 1),
    ("{'a': {'b': 1}}.?a.b.orValue(0)", 1),
    ("{'a': {'b': 1}}.?x.b.orValue(0)", 0),
    ("{'a': {'b': 1}}.?a.c.orValue(0)", 0),
    ("[1, 2][?1].orValue(0)", 2),
    ("[1, 2][?5].hasValue()", False),
    ("{'a': 1}[?'a'].value()", 1),
    ("optional.none().value()", Err("optional.none() dereference")),
    ("optional.of(1).hasValue()", True),
    ("optional.ofNonZeroValue('').hasValue()", False),
    ("optional.none().or(optional.of(3)).value()", 3),
    ("optional.of(2).optMap(v, v * 2).value()", 4),
    ("optional.none().optMap(v, v * 2).hasValue()", False),
    ("optional.of(2).optFlatMap(v, optional.of(v * 3)).value()", 6),
    ("[?optional.of(1), ?optional.none(), 3]", [1, 3]),
    ("{?'a': optional.of(1), ?'b': optional.none()}", {"a": 1}),
    ("optional.none", CompileErr("undeclared reference to 'optional.none'")),
    # -- macros and bind
    ("[1, 2, 3].all(x, x > 0)", True),
    ("[1, 2, 3].exists(x, x > 2)", True),
    ("[1, 2, 3].exists_one(x, x > 1)", False),
    ("[1, 2, 3].existsOne(x, x > 2)", True),
    ("[1, 2, 3].map(x, x * 2)", [2, 4, 6]),
    ("[1, 2, 3].map(x, x > 1, x * 2)", [4, 6]),
    ("[1, 2, 3].filter(x, x > 1)", [2, 3]),
    ("{'a': 1, 'b': 2}.filter(k, k == 'b')", ["b"]),
    ("{'a': 1, 'b': 2}.all(k, v, v > 0)", True),
    ("[10, 20].exists(i, v, i == 1 && v == 20)", True),
    ("[10, 20].transformList(i, v, i + v)", [10, 21]),
    ("[10, 20].transformList(i, v, i > 0, v)", [20]),
    ("{'a': 1}.transformMap(k, v, v + 1)", {"a": 2}),
    ("{'a': 1}.transformMapEntry(k, v, {k + k: v})", {"aa": 1}),
    ("[3, 1, 2].sortBy(x, -x)", [3, 2, 1]),
    ("1.exists(x, x > 0)", CompileErr("cannot be range of a comprehension")),
    ("dyn(1).exists(x, x > 0)", Err("got 'types.Int', expected iterable type")),
    ("[1].all(1, true)", CompileErr("variable name must be a simple identifier")),
    ("has(x)", CompileErr("invalid argument to has() macro")),
    ("cel.bind(a, 2, a * a)", 4),
    ("cel.bind(a, 2, cel.bind(a, a + 1, a * 10))", 30),
    ("cel.bind(a, [1, 2], a.map(a, a * 2))", [2, 4]),
    ("[1, 2].map(x, [3].map(y, x * y))", [[3], [6]]),
    # -- lists and sets libraries
    ("[1, 2, 3].isSorted()", True),
    ("[3, 1].isSorted()", False),
    ("[1, 2, 3].sum()", 6),
    ("[1.5, 2.5].sum()", 4.0),
    ("[3, 1, 2].min()", 1),
    ("[3, 1, 2].max()", 3),
    ("dyn([]).min()", Err("min of empty list")),
    ("[1, 2, 1].indexOf(1)", 0),
    ("[1, 2, 1].lastIndexOf(1)", 2),
    ("[1, 2, 3, 4].slice(1, 3)", [2, 3]),
    ("[1, 2].slice(2, 1)", Err("start index must be less than or equal to end index")),
    ("[[1], [2, dyn([3])]].flatten()", [1, 2, [3]]),
    ("[1, 2, 2, 3].distinct()", [1, 2, 3]),
    ("[1, 2, 3].reverse()", [3, 2, 1]),
    ("['b', 'c', 'a'].sort()", ["a", "b", "c"]),
    ("lists.range(3)", [0, 1, 2]),
    ("sets.contains([1, 2, 3], [3, 1])", True),
    ("sets.equivalent([1, 2], [2, 1, 1])", True),
    ("sets.intersects([1, 2], [3, 2])", True),
    # -- IP and CIDR libraries
    ("cidr('192.168.128.0/19').containsIP('192.168.155.224')", True),
    ("cidr('192.168.0.0/24').containsIP(ip('192.168.1.1'))", False),
    ("cidr('192.168.0.0/16').containsCIDR('192.168.10.0/24')", True),
    ("cidr('192.168.1.0/24').containsCIDR(cidr('192.168.0.0/16'))", False),
    ("cidr('192.168.0.1/24').masked() == cidr('192.168.0.0/24')", True),
    ("cidr('192.168.0.1/24') == cidr('192.168.0.1/24').masked()", False),
    ("cidr('192.168.0.1/24').ip() == ip('192.168.0.1')", True),
    ("cidr('::1/128').prefixLength()", 128),
    ("string(cidr('10.1.2.3/8').masked())", "10.0.0.0/8"),
    ("cidr('192.168.0.0/33')", Err("parse error")),
    ("isCIDR('::ffff:1.2.3.4/120')", False),
    ("ip('::1').family()", 6),
    ("ip('127.0.0.1').isLoopback()", True),
    ("ip('0.0.0.0').isUnspecified()", True),
    ("ip('224.0.0.1').isLinkLocalMulticast()", True),
    ("ip('ff02::1').isLinkLocalMulticast()", True),
    ("ip('169.254.169.254').isLinkLocalUnicast()", True),
    ("ip('192.168.0.1').isGlobalUnicast()", True),
    ("ip('255.255.255.255').isGlobalUnicast()", False),
    ("ip('127.0.0.256')", Err("parse error")),
    ("ip('fe80::1%eth0')", Err("zone value is not allowed")),
    ("ip('::ffff:1.2.3.4')", Err("IPv4-mapped IPv6 address")),
    ("isIP('01.2.3.4')", False),
    ("ip.isCanonical('2001:db8::abcd')", True),
    ("ip.isCanonical('2001:DB8::ABCD')", False),
    ("string(ip('2001:DB8::0:0:0:ABCD'))", "2001:db8::abcd"),
    ("dyn(ip('1.2.3.4')) == '1.2.3.4'", Err("no such overload")),
    # -- compile-time checks
    ("noSuchVar", CompileErr("undeclared reference to 'noSuchVar' (in container '')")),
    ("foo(1)", CompileErr("undeclared reference to 'foo'")),
    ("'a'.foo()", CompileErr("undeclared reference to 'foo'")),
    ("'a'.quantity()", CompileErr("undeclared reference to 'quantity'")),
    ("size(1)", CompileErr("found no matching overload for 'size' applied to '(int)'")),
    (
        "'a'.startsWith(1)",
        CompileErr("found no matching overload for 'startsWith' applied to 'string.(int)'"),
    ),
    ("device.foo", CompileErr("undefined field 'foo'")),
    ("1.foo", CompileErr("does not support field selection")),
    ("if", CompileErr("reserved identifier: if")),
    ("a.b{c: 1}", CompileErr("message construction is not supported")),
    ("1 +", CompileErr("Syntax error")),
    ("'unterminated", CompileErr("unterminated string literal")),
    ("1 # 2", CompileErr("token recognition error at: '#'")),
]


def _evaluate(expr: str) -> Any:
    return compile_any(expr).evaluate_value(DEVICE)


@pytest.mark.parametrize(("expr", "expected"), CASES, ids=[c[0][:60] for c in CASES])
def test_language(expr: str, expected: Any) -> None:
    if isinstance(expected, CompileErr):
        with pytest.raises(CelCompileError) as cinfo:
            compile_any(expr)
        assert expected.text in cinfo.value.message
        return
    if isinstance(expected, Err):
        with pytest.raises(CelRuntimeError) as rinfo:
            _evaluate(expr)
        assert expected.text in rinfo.value.message
        return
    actual = _evaluate(expr)
    assert type(actual) is type(expected), (actual, expected)
    assert actual == expected


def test_value_types() -> None:
    assert isinstance(_evaluate("quantity('1Gi')"), Quantity)
    assert isinstance(_evaluate("semver('1.2.3')"), Semver)
    assert str(_evaluate("quantity('1Gi').add(quantity('1Gi'))")) == "2Gi"


def test_compile_error_position() -> None:
    expr = "device.driver == 'a' &&\n  device.nope == 'b'"
    with pytest.raises(CelCompileError) as info:
        compile_any(expr)
    err = info.value
    assert (err.line, err.column) == (2, 9)
    assert err.expression == expr
    assert str(err) == (
        "compilation failed: ERROR: <input>:2:9: undefined field 'nope'\n"
        " |   device.nope == 'b'\n"
        " | ........^"
    )


def test_expression_size_and_nesting_limits() -> None:
    with pytest.raises(CelCompileError, match="size exceeds limit"):
        compile_any("true && " * 2000 + "true")
    with pytest.raises(CelCompileError, match=r"recursion limit|nesting exceeds"):
        compile_any("(" * 300 + "1" + ")" * 300)
    deep = "1" + " + 1" * 240
    assert compile_any(deep).evaluate_value(DEVICE) == 241
    long_and = "&&".join(["true"] * 1500)
    assert compile_any(long_and).evaluate_value(DEVICE) is True


def test_cost_limit_stops_nested_comprehensions_quickly() -> None:
    program = compile_any("lists.range(1000).all(x, lists.range(1000).all(y, x + y >= 0))")
    with pytest.raises(CelRuntimeError, match="cost limit exceeded"):
        program.evaluate_value(DEVICE)
    # the counter is reset per evaluation
    small = compile_any("lists.range(100).all(x, x >= 0)")
    for _ in range(3):
        assert small.evaluate_value(DEVICE) is True


@pytest.mark.parametrize(
    "expr",
    [
        # repeated doubling without any loop
        "".join(f"cel.bind(v{i + 1}, v{i} + v{i}, " for i in range(40)).replace(
            "v0 + v0", "'xxxxxxxxxx' + 'y'"
        )
        + "size(v40) > 0"
        + ")" * 40,
        "lists.range(1000).map(x, lists.range(100000 + x)).size() > 0",
        "lists.range(100).map(x, 'ab'.replace('', lists.range(5000 + x).map(y, 'z').join())).size() > 0",
        # (constant sub-expressions are folded at compile time, as cel-go's OptOptimize does)
        "lists.range(200000 + size(device.driver)).size() > 0 && "
        "lists.range(900000 + size(device.driver)).size() > 0",
    ],
)
def test_cost_limit_bounds_memory(expr: str) -> None:
    with pytest.raises(CelRuntimeError, match="cost limit exceeded"):
        compile_any(expr).evaluate_value(DEVICE)
