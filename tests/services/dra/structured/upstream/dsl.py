"""Python versions of the object builders of upstream's allocator test table (same behaviour)."""

from __future__ import annotations

import copy
import re

from tests.services.dra.structured.upstream.dsl_results import (
    allocation_result,
    allocation_result_with_config,
    allocation_result_with_configs,
    local_node_selector,
    multiple_results,
    node_label_selector,
    result,
    result2,
    result_bc,
)
from tests.services.dra.structured.upstream.goeval import Obj, Q, getf

C: dict[str, str] = {}  # constants, filled by the loader


def _sprintf(fmt, *args):
    it = iter(args)

    def rep(m):
        v = next(it)
        if m.group(0) == "%v" and isinstance(v, bool):
            return "true" if v else "false"
        if m.group(0) == "%q":
            return '"' + str(v) + '"'
        return str(v)

    return re.sub(r"%[sdvq]", rep, fmt)


def node(name, region):
    return Obj("Node", ObjectMeta=Obj("ObjectMeta", Name=name, Labels={"region": region, "planet": "earth"}))


def _sel(expr):
    return Obj("DeviceSelector", CEL=Obj("CELDeviceSelector", Expression=expr))


def cls(name, driver):
    return Obj(
        "DeviceClass",
        ObjectMeta=Obj("ObjectMeta", Name=name),
        Spec=Obj("DeviceClassSpec", Selectors=[_sel(f'device.driver == "{driver}"')]),
    )


def class_multi(name, driver, multi):
    v = "true" if multi else "false"
    return Obj(
        "DeviceClass",
        ObjectMeta=Obj("ObjectMeta", Name=name),
        Spec=Obj(
            "DeviceClassSpec",
            Selectors=[_sel(f'device.driver == "{driver}" && device.allowMultipleAllocations == {v}')],
        ),
    )


def device_configuration(driver, attribute):
    return Obj(
        "DeviceConfiguration",
        Opaque=Obj("Opaque", Driver=driver, Parameters={attribute: attribute + "Value"}),
    )


def class_with_config(name, driver, attribute):
    c = cls(name, driver)
    c["Spec"]["Config"] = [
        Obj("DeviceClassConfiguration", DeviceConfiguration=device_configuration(driver, attribute))
    ]
    return c


def claim_with_requests(name, constraints, *requests):
    return Obj(
        "ResourceClaim",
        ObjectMeta=Obj("ObjectMeta", Name=name),
        Spec=Obj(
            "Spec", Devices=Obj("Devices", Requests=list(requests), Constraints=list(constraints or []))
        ),
    )


def request(name, klass, count, *selectors):
    return Obj(
        "DeviceRequest",
        Name=name,
        Exactly=Obj(
            "Exactly",
            Count=count,
            AllocationMode="ExactCount",
            DeviceClassName=klass,
            Selectors=list(selectors),
        ),
    )


def all_device_request(name, klass):
    return Obj(
        "DeviceRequest", Name=name, Exactly=Obj("Exactly", AllocationMode="All", DeviceClassName=klass)
    )


def sub_request(name, klass, count, *fields):
    s = Obj(
        "DeviceSubRequest",
        Name=name,
        Count=count,
        AllocationMode="ExactCount",
        DeviceClassName=klass,
        Selectors=[],
        Tolerations=[],
    )
    for f in fields:
        if "CEL" in f:
            s["Selectors"].append(f)
        else:
            s["Tolerations"].append(f)
    return s


def request_with_prioritized_list(name, *subs):
    return Obj("DeviceRequest", Name=name, FirstAvailable=list(subs))


def claim_with_request(name, req, klass, *constraints):
    return claim_with_requests(name, list(constraints), request(req, klass, 1))


def claim(name):
    return Obj(
        "ResourceClaim", ObjectMeta=Obj("ObjectMeta", Name=name), Spec=Obj("Spec", Devices=Obj("Devices"))
    )


def claim_with_device_config(name, req, klass, driver, attribute):
    c = claim_with_request(name, req, klass)
    c["Spec"]["Devices"]["Config"] = [
        Obj("DeviceClaimConfiguration", DeviceConfiguration=device_configuration(driver, attribute))
    ]
    return c


def device_claim_config(requests, cfg):
    return Obj("DeviceClaimConfiguration", Requests=list(requests or []), DeviceConfiguration=cfg)


def device(name, capacity, attributes):
    d = Obj("Device", Name=name, Attributes=attributes or {})
    if isinstance(capacity, dict):
        d["Capacity"] = {k: Obj("DeviceCapacity", Value=v) for k, v in capacity.items()}
    elif capacity == "fromCounters":
        d["_fromCounters"] = True
    return d


def device_counter_consumption(cs, counters):
    return Obj(
        "DeviceCounterConsumption",
        CounterSet=cs,
        Counters={k: Obj("Counter", Value=v) for k, v in (counters or {}).items()},
    )


def counter_set(name, counters):
    return Obj(
        "CounterSet", Name=name, Counters={k: Obj("Counter", Value=v) for k, v in (counters or {}).items()}
    )


def resource_pool(name, count):
    return Obj("ResourcePool", Name=name, ResourceSliceCount=count, Generation=1)


def slice_(name, node_selection, pool, driver):
    if isinstance(pool, str):
        pool = Obj("ResourcePool", Name=pool, ResourceSliceCount=1, Generation=1)
    s = Obj(
        "ResourceSlice", ObjectMeta=Obj("ObjectMeta", Name=name), Spec=Obj("Spec", Driver=driver, Pool=pool)
    )
    if isinstance(node_selection, dict):
        s["Spec"]["NodeSelector"] = node_selection
    elif node_selection == "nodeSelectionAll":
        s["Spec"]["AllNodes"] = True
    elif node_selection == "nodeSelectionPerDevice":
        s["Spec"]["PerDeviceNodeSelection"] = True
    else:
        s["Spec"]["NodeName"] = node_selection
    return s


def slice_with_devices(name, node_selection, pool, driver, *devices):
    s = slice_(name, node_selection, pool, driver)
    s["Spec"]["Devices"] = [copy.deepcopy(d) for d in devices]
    return s


def slice_with_counter_sets(name, node_selection, pool, driver, *sets):
    s = slice_(name, node_selection, pool, driver)
    s["Spec"]["SharedCounters"] = list(sets)
    return s


def slice_with_one_device(name, ns, pool, driver):
    return slice_with_devices(name, ns, pool, driver, device("device-1", None, None))


def slice_with_multiple_devices(name, ns, pool, driver, count):
    return slice_with_devices(
        name, ns, pool, driver, *[device(f"device-{i}", None, None) for i in range(count)]
    )


def ident(*xs):
    return list(xs)


FUNCS = {
    "node": node,
    "class": cls,
    "classWithAllowMultipleAllocations": class_multi,
    "deviceConfiguration": device_configuration,
    "classWithConfig": class_with_config,
    "claimWithRequests": claim_with_requests,
    "request": request,
    "deviceRequest": request,
    "allDeviceRequest": all_device_request,
    "subRequest": sub_request,
    "requestWithPrioritizedList": request_with_prioritized_list,
    "claimWithRequest": claim_with_request,
    "claim": claim,
    "claimWithDeviceConfig": claim_with_device_config,
    "deviceClaimConfig": device_claim_config,
    "device": device,
    "deviceCounterConsumption": device_counter_consumption,
    "counterSet": counter_set,
    "resourcePool": resource_pool,
    "slice": slice_,
    "sliceWithDevices": slice_with_devices,
    "sliceWithCounterSets": slice_with_counter_sets,
    "sliceWithNoDevices": lambda n, ns, p, d: slice_with_devices(n, ns, p, d),
    "sliceWithOneDevice": slice_with_one_device,
    "sliceWithMultipleDevices": slice_with_multiple_devices,
    "deviceAllocationResult": result,
    "deviceRequestAllocationResult": result2,
    "deviceRequestAllocationResultWithBindingConditions": result_bc,
    "multipleDeviceAllocationResults": multiple_results,
    "nodeLabelSelector": node_label_selector,
    "localNodeSelector": local_node_selector,
    "allocationResult": allocation_result,
    "allocationResultWithConfig": allocation_result_with_config,
    "allocationResultWithConfigs": allocation_result_with_configs,
    "objects": ident,
    "unwrap": ident,
    "unwrapResourceSlices": ident,
    "MakeDeviceID": lambda a, b, c: (a, b, c),
    "new": lambda x: x,
    "int64": lambda x: x,
    "append": lambda xs, *ys: list(xs or []) + list(ys),
}

PKG = {
    "fmt.Sprintf": _sprintf,
    "resource.MustParse": lambda s: Q(s),
    "resource.NewQuantity": lambda n, f: Q(str(n)),
    "ptr.To": lambda x: x,
    "gomega.MatchError": lambda x: x,
    "gomega.ContainSubstring": lambda s: ("substr", s),
    "apitypes.UID": lambda s: s,
    "resourceapi.DeviceAllocationMode": lambda s: s,
    "resourceapi.FullyQualifiedName": lambda s: s,
    "resourceapi.QualifiedName": lambda s: s,
    "slices.Concat": lambda *ls: [x for lst in ls for x in lst],
    "sets.New": lambda *xs: list(xs),
    "internal.MakeSharedDeviceID": lambda did, sid: (*did, sid),
}


def method(recv, name, args):
    r = copy.deepcopy(recv) if isinstance(recv, dict) else recv
    t = r.get("_t") if isinstance(r, dict) else None
    if name in ("obj",):
        return recv
    if name == "DeepCopy":
        return r
    if name == "withRequests":
        r["Spec"]["Devices"]["Requests"] = list(args)
    elif name == "withConstraints":
        r["Spec"]["Devices"]["Constraints"] = list(args)
    elif name == "withConfigs":
        r["Spec"]["Devices"]["Config"] = list(args[0])
    elif name == "withTolerations":
        for req in r["Spec"]["Devices"]["Requests"]:
            req["Exactly"].setdefault("Tolerations", []).extend(args)
    elif name == "withCapacityRequest":
        caps = Obj("CapacityRequirements", Requests={C["capacity0"]: args[0]} if args[0] is not None else {})
        if t == "DeviceRequest":
            r["Exactly"]["Capacity"] = caps
        else:
            r["Capacity"] = caps
    elif name == "withSelectors":
        r["Exactly"]["Selectors"] = list(args)
    elif name == "withAllocationMode":
        r["AllocationMode"] = args[0]
    elif name == "withTaints":
        r.setdefault("Taints", []).extend(args)
        r.pop("_fromCounters", None)
    elif name == "withDeviceCounterConsumption":
        r.setdefault("ConsumesCounters", []).extend(args)
        if r.pop("_fromCounters", False):
            from_counters: dict[str, Obj] = {}
            for dcc in r["ConsumesCounters"]:
                for cname, c in dcc["Counters"].items():
                    from_counters[cname] = Obj("DeviceCapacity", Value=c["Value"])
            r["Capacity"] = from_counters
    elif name == "withNodeSelection":
        sel = args[0]
        if isinstance(sel, dict):
            r["NodeSelector"] = sel
        elif sel == "nodeSelectionAll":
            r["AllNodes"] = True
        else:
            r["NodeName"] = sel
        r.pop("_fromCounters", None)
    elif name == "withBindingConditions":
        r["BindingConditions"] = list(args[0] or [])
        r["BindingFailureConditions"] = list(args[1] or [])
        r.pop("_fromCounters", None)
    elif name == "withBindsToNode":
        r["BindsToNode"] = args[0]
        r.pop("_fromCounters", None)
    elif name == "withAllowMultipleAllocations":
        r["AllowMultipleAllocations"] = True
        r.pop("_fromCounters", None)
    elif name == "withCapacityRequestPolicyRange":
        r.pop("_fromCounters", None)
        caps = r.setdefault("Capacity", {})
        for cname, q in args[0].items():
            caps[cname] = Obj(
                "DeviceCapacity",
                Value=q,
                RequestPolicy=Obj(
                    "Policy", Default=Q("2"), ValidRange=Obj("Range", Min=Q("2"), Step=Q("2"), Max=Q("4"))
                ),
            )
    elif name == "withCapacityRequestPolicyValidValues":
        r.pop("_fromCounters", None)
        default, capmap, extra = args
        caps = r.setdefault("Capacity", {})
        for cname, q in capmap.items():
            caps[cname] = Obj(
                "DeviceCapacity",
                Value=q,
                RequestPolicy=Obj("Policy", Default=default, ValidValues=[default, *(extra or [])]),
            )
    elif name == "withConsumedCapacity":
        r["ShareID"] = args[0]
        r["ConsumedCapacity"] = args[1]
    elif name == "Clone":
        return r
    else:
        raise NameError(f"method {name} on {t}")
    return r


class Helpers:
    funcs = FUNCS
    pkg = PKG

    @staticmethod
    def method(recv, name, args):
        return method(recv, name, args)


__all__ = ["C", "Helpers", "getf"]
