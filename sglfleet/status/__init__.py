"""``sglfleet status``'s back end: what each host serves, read over SSH, and the routers' view."""
