"""
The stdlib-only modules shipped to hosts that the controller uses too, in ``files/shipped/``.

They live with what is shipped (``files/``), so ``files/`` imports nothing from
``sglfleet/``: on a host the stand-in imports them as its neighbours in
``/opt/sglfleet/standin/``, and the controller imports them as this package's
modules, whose one folder is ``files/shipped/``:

- ``server_flags``: sglang's launch flags, read from its own ``server_args.py``
  (the lint checks an inventory's flags with it; the stand-in parses its argv)
- ``stub_import``: a model file executed with its non-stdlib imports stubbed
  (the stand-in's EAGLE-3 check, the patch engine's tests)

**Example:**

.. code:: python

    from sglfleet.shipped.server_flags import load_flags
"""

from sglfleet import FILES

__path__ = [str(FILES / "shipped")]
