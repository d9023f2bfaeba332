"""Builders for expected results and node selectors of upstream's allocator test table."""

from __future__ import annotations

from tests.services.dra.structured.upstream.goeval import Obj


def _device_configuration(driver, attribute):
    return Obj(
        "DeviceConfiguration",
        Opaque=Obj("Opaque", Driver=driver, Parameters={attribute: attribute + "Value"}),
    )


def result(req, driver, pool, dev, admin=False, *tolerations):
    r = Obj("Result", Request=req, Driver=driver, Pool=pool, Device=dev, Tolerations=list(tolerations))
    if admin:
        r["AdminAccess"] = True
    return r


def result2(req, driver, pool, dev):
    return Obj("Result", Request=req, Driver=driver, Pool=pool, Device=dev)


def result_bc(req, driver, pool, dev, bc, bfc, *tolerations):
    return Obj(
        "Result",
        Request=req,
        Driver=driver,
        Pool=pool,
        Device=dev,
        BindingConditions=list(bc or []),
        BindingFailureConditions=list(bfc or []),
        Tolerations=list(tolerations),
    )


def multiple_results(req, driver, pool, count, start):
    return [result(req, driver, pool, f"device-{i}", False) for i in range(start, start + count)]


def node_label_selector(key, *values):
    return Obj(
        "NodeSelector",
        NodeSelectorTerms=[
            Obj("Term", MatchExpressions=[Obj("Req", Key=key, Operator="In", Values=list(values))])
        ],
    )


def local_node_selector(name):
    return Obj(
        "NodeSelector",
        NodeSelectorTerms=[
            Obj("Term", MatchFields=[Obj("Req", Key="metadata.name", Operator="In", Values=[name])])
        ],
    )


def allocation_result(selector, *results):
    return Obj("Expect", NodeSelector=selector, Results=list(results), Config=None)


def allocation_result_with_config(selector, driver, source, attribute, *results):
    return Obj(
        "Expect",
        NodeSelector=selector,
        Results=list(results),
        Config=[
            Obj("Cfg", Source=source, Requests=[], Opaque=_device_configuration(driver, attribute)["Opaque"])
        ],
    )


def allocation_result_with_configs(selector, results, configs):
    return Obj("Expect", NodeSelector=selector, Results=list(results), Config=configs)
