# Run in every Python kernel of Warren's code interpreter before its first
# cell: DataFrames also display as data (the SDK's Result.data), and, in
# the default context (WARREN_KERNEL_PREIMPORT=1), the usual data packages
# are imported ahead so that the template's snapshot holds them loaded.
import json as _w_json
import os as _w_os

from IPython import get_ipython as _w_get_ipython
from IPython.core.formatters import BaseFormatter as _w_BaseFormatter
from traitlets import ObjectName as _w_ObjectName
from traitlets import Unicode as _w_Unicode


class _WarrenDataFormatter(_w_BaseFormatter):
    """Formats tabular objects as JSON data ({columns, index, data})."""

    format_type = _w_Unicode("application/vnd.warren.data+json")
    print_method = _w_ObjectName("_repr_warren_data_")
    _return_type = (dict, list)


def _w_frame_data(df):
    return _w_json.loads(df.to_json(orient="split", date_format="iso", default_handler=str))


_w_ip = _w_get_ipython()
if _w_ip is not None:
    _w_f = _WarrenDataFormatter(parent=_w_ip.display_formatter)
    _w_ip.display_formatter.formatters[_w_f.format_type] = _w_f
    _w_f.for_type_by_name("pandas.core.frame", "DataFrame", _w_frame_data)
    _w_f.for_type_by_name("pandas.core.series", "Series", lambda s: _w_frame_data(s.to_frame()))
    del _w_f
del _w_ip

if _w_os.environ.pop("WARREN_KERNEL_PREIMPORT", ""):
    try:
        import numpy  # noqa: F401
        import pandas  # noqa: F401
        import matplotlib.pyplot  # noqa: F401
    except ImportError:
        pass
