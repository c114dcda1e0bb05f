"""YAML reading for configuration files: duplicate keys refused, syntax errors as one line naming the position.

Apart from ``config.schema`` so that PyYAML is imported only when a YAML document is read.
"""

from __future__ import annotations

from typing import Any

import yaml

from autoscaler.config.schema import ConfigError

__all__ = ["RefuseDuplicateKeys", "StrictLoader", "load_yaml"]


class RefuseDuplicateKeys(yaml.constructor.SafeConstructor):
    """A constructor that refuses duplicate keys, which plain YAML loading would silently let the last win."""

    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict[Any, Any]:
        seen: dict[str, yaml.Mark] = {}
        for key_node, _ in node.value:
            if isinstance(key_node, yaml.ScalarNode) and key_node.tag != "tag:yaml.org,2002:merge":
                first = seen.setdefault(key_node.value, key_node.start_mark)
                if first is not key_node.start_mark:
                    raise yaml.constructor.ConstructorError(
                        None,
                        None,
                        f"duplicate key {key_node.value!r} (first on line {first.line + 1})",
                        key_node.start_mark,
                    )
        return super().construct_mapping(node, deep)


class StrictLoader(RefuseDuplicateKeys, yaml.SafeLoader):
    """SafeLoader that refuses duplicate keys (pure Python: its error messages name the exact position)."""


class _OwnFileLoader(RefuseDuplicateKeys, getattr(yaml, "CSafeLoader", yaml.SafeLoader)):  # type: ignore[misc]
    """StrictLoader on libyaml's parser where PyYAML has it: ten times faster, for tidal's own files, which hold
    no syntax error whose position would need naming."""


def load_yaml(document: str, source: str, *, own: bool = False) -> Any:
    """See :func:`autoscaler.config.schema.load_yaml`."""
    try:
        # SafeLoader subclasses: no arbitrary objects.
        return yaml.load(document, Loader=_OwnFileLoader if own else StrictLoader)
    except yaml.MarkedYAMLError as err:
        mark = err.problem_mark
        problem = err.problem or "invalid YAML"
        if (
            err.context
            and err.context_mark is not None
            and err.context_mark.line != getattr(mark, "line", -1)
        ):
            problem += f" ({err.context} on line {err.context_mark.line + 1})"
        if mark is None:
            raise ConfigError([problem], source) from None
        raise ConfigError([problem], f"{source}:{mark.line + 1}:{mark.column + 1}") from None
    except yaml.YAMLError as err:
        raise ConfigError([f"invalid YAML: {err}"], source) from None
    except RecursionError:
        raise ConfigError(["invalid YAML: nested too deeply"], source) from None
