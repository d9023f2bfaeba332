"""Evaluate Go expressions and statements of the upstream test table into Python values.

Structs become ``Obj`` dicts keyed by Go field names; pointers are transparent; closures run.
"""

from __future__ import annotations

import copy
import re

from tests.services.dra.structured.upstream.goparse import P, tokenize


class Obj(dict):
    """A Go struct value: Go field names as keys, '_t' = type name."""

    def __init__(self, t, **kw):
        super().__init__(kw)
        self["_t"] = t


META_FIELDS = {"Name", "Labels", "Namespace", "UID", "GenerateName"}


def getf(o, name):
    if isinstance(o, dict):
        if name in META_FIELDS and "ObjectMeta" in o:
            return o["ObjectMeta"].get(name)
        if name == "Opaque" and "DeviceConfiguration" in o:
            return o["DeviceConfiguration"].get("Opaque")
        if name not in o:
            return None
        return o[name]
    raise TypeError(f"getf {name} on {type(o)}")


def setf(o, name, value):
    if name in META_FIELDS and "ObjectMeta" in o:
        o["ObjectMeta"][name] = value
    else:
        o[name] = value


def autovivify(o, name):
    v = getf(o, name)
    if v is None:
        v = Obj(name)
        setf(o, name, v)
    return v


# ---------------------------------------------------------------- constants
def load_consts(src):
    consts = {}
    found = re.search(r"const \(\n(.*?)\n\)", src, re.S)
    assert found is not None, "no const block"
    block = found.group(1)
    for m in re.finditer(r'^\s*(\w+)\s*=\s*"([^"]*)"', block, re.M):
        consts[m.group(1)] = m.group(2)
    for block in re.finditer(r"const \(\n(.*?)\n\)", src, re.S):
        for m in re.finditer(r'^\s*(\w+)\s*=\s*"([^"]*)"', block.group(1), re.M):
            consts[m.group(1)] = m.group(2)
    return consts


class Q(str):
    """A quantity value (string form)."""


def qty(n, fmt=None):
    return Q(str(n))


ENUMS = {
    "resourceapi.DeviceAllocationModeExactCount": "ExactCount",
    "resourceapi.DeviceAllocationModeAll": "All",
    "resourceapi.DeviceTaintEffectNone": "None",
    "resourceapi.DeviceTaintEffectNoSchedule": "NoSchedule",
    "resourceapi.DeviceTaintEffectNoExecute": "NoExecute",
    "resourceapi.DeviceTolerationOpExists": "Exists",
    "resourceapi.DeviceTolerationOpEqual": "Equal",
    "resourceapi.AllocationConfigSourceClass": "FromClass",
    "resourceapi.AllocationConfigSourceClaim": "FromClaim",
    "v1.NodeSelectorOpIn": "In",
    "v1.NodeSelectorOpNotIn": "NotIn",
    "v1.NodeSelectorOpExists": "Exists",
    "resource.BinarySI": "BinarySI",
    "resource.DecimalSI": "DecimalSI",
    "resourceapi.AllocationResultsMaxSize": 32,
    "internal.Stable": "stable",
    "internal.Incubating": "incubating",
    "internal.Experimental": "experimental",
    "true": True,
    "false": False,
    "nil": None,
}


class Env:
    def __init__(self, consts, parent=None):
        self.vars = dict(consts)
        self.parent = parent

    def get(self, name):
        if name in self.vars:
            return self.vars[name]
        if self.parent:
            return self.parent.get(name)
        if name in ENUMS:
            return ENUMS[name]
        raise NameError(name)

    def set(self, name, v):
        e = self
        while e is not None:
            if name in e.vars:
                e.vars[name] = v
                return
            e = e.parent
        self.vars[name] = v


class Return(Exception):
    def __init__(self, v):
        self.v = v


def qualname(e):
    if e[0] == "id":
        return e[1]
    if e[0] == "sel":
        q = qualname(e[1])
        return None if q is None else q + "." + e[2]
    return None


class Evaluator:
    def __init__(self, helpers, env):
        self.h = helpers
        self.env = env

    def ev(self, e, env=None, expect=None):
        env = env or self.env
        k = e[0]
        if k == "lit":
            return e[1]
        if k == "id":
            return env.get(e[1])
        if k == "addr" or k == "deref":
            return self.ev(e[1], env, expect)
        if k == "neg":
            return -self.ev(e[1], env)
        if k == "bin":
            a, b = self.ev(e[2], env), self.ev(e[3], env)
            if e[1] == "+":
                return a + b
            if e[1] == "-":
                return a - b
            if e[1] == "*":
                return a * b
            if e[1] == "/":
                return a // b
            if e[1] == "==":
                return a == b
            return a and b
        if k == "sel":
            q = qualname(e)
            if q is not None and q in ENUMS:
                return ENUMS[q]
            base = self.ev(e[1], env)
            return getf(base, e[2])
        if k == "index":
            base = self.ev(e[1], env)
            return base[self.ev(e[2], env)]
        if k == "composite":
            return self.composite(e[1] or expect, e[2], env)
        if k == "funclit":
            return ("closure", e[1], env)
        if k == "call":
            return self.call(e, env)
        if k == "spread":
            return self.ev(e[1], env)
        raise ValueError(e)

    def composite(self, typ, elems, env):
        if typ is None:
            # elided type: struct if keyed by identifiers, else list
            if elems and elems[0][0] is not None and elems[0][0][0] == "id" and elems[0][0][1][:1].isupper():
                typ = ("named", "?")
            elif elems and elems[0][0] is not None:
                typ = ("map", None, None)
            else:
                typ = ("slice", None)
        if typ[0] == "slice":
            return [
                self.ev(v, env, typ[1]) if v[0] != "composite" else self.composite(v[1] or typ[1], v[2], env)
                for _, v in elems
            ]
        if typ[0] == "map":
            out = {}
            for kx, v in elems:
                key = self.ev(kx, env)
                out[key] = (
                    self.composite(v[1] or typ[2], v[2], env)
                    if v[0] == "composite"
                    else self.ev(v, env, typ[2])
                )
            return out
        if typ[0] == "ptr":
            return self.composite(typ[1], elems, env)
        name = typ[1]
        if name.split(".")[-1] in ("ConsumedCapacityCollection", "ConsumedCapacity"):
            return self.composite(("map", None, ("named", "ConsumedCapacity")), elems, env)
        o = Obj(name.split(".")[-1])
        for kx, v in elems:
            if kx is None:
                raise ValueError(f"positional struct literal {name}")
            field = kx[1]
            o[field] = self.composite(v[1], v[2], env) if v[0] == "composite" else self.ev(v, env)
        return o

    def run_block(self, stmts, env):
        for st in stmts:
            if st[0] == "return":
                raise Return(self.ev(st[1], env))
            if st[0] == "expr":
                self.ev(st[1], env)
                continue
            _, op, lhs, rhs = st
            val = self.ev(rhs, env)
            if op == ":=":
                env.vars[lhs[1]] = val
                continue
            if op == "+=":
                val = self.ev(lhs, env) + val
            self.assign(lhs, val, env)

    def assign(self, lhs, val, env):
        if lhs[0] == "id":
            env.set(lhs[1], val)
        elif lhs[0] == "sel":
            base = self.ev(lhs[1], env)
            setf(base, lhs[2], val)
        elif lhs[0] == "index":
            base = self.ev(lhs[1], env)
            base[self.ev(lhs[2], env)] = val
        else:
            raise ValueError(lhs)

    def call(self, e, env):
        fn = e[1]
        args = []
        for a in e[2]:
            if a[0] == "spread":
                args.extend(self.ev(a[1], env))
            else:
                args.append(self.ev(a, env))
        if fn[0] == "funclit" or (fn[0] == "id" and False):
            pass
        if fn[0] == "funclit":
            try:
                self.run_block(fn[1], Env({}, env))
            except Return as r:
                return r.v
            return None
        if fn[0] == "sel":
            q = qualname(fn)
            if q is not None and q in self.h.pkg:
                return self.h.pkg[q](*args)
            recv = self.ev(fn[1], env)
            return self.h.method(recv, fn[2], args)
        if fn[0] == "id":
            if fn[1] in self.h.funcs:
                return self.h.funcs[fn[1]](*args)
            v = env.get(fn[1])
            if isinstance(v, tuple) and v[0] == "closure":
                try:
                    self.run_block(v[1], Env({}, v[2]))
                except Return as r:
                    return r.v
            raise NameError(fn[1])
        raise ValueError(fn)


def parse_expr(src):
    p = P(tokenize(src))
    return p.parse_expr()


def parse_stmts(src):
    p = P(tokenize("{" + src + "}"))
    return p.parse_block()


def deepcopy(o):
    return copy.deepcopy(o)
