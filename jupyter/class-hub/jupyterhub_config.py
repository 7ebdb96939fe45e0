# JupyterHub's configuration for the class server (coursekit/classhub.py starts it, with the
# state file it wrote: the seats, their copies, cgroups and environment, the hub's ports).
# Only JupyterHub's own parts: LocalProcessSpawner, the shared-password login,
# configurable-http-proxy, jupyterhub-idle-culler.
import json
import os
from pathlib import Path

c = get_config()  # noqa: F821  (JupyterHub's loader defines it)
state = json.loads(Path(os.environ["CLASS_HUB_STATE"]).read_text())
seats = {seat["name"]: seat for seat in state["seats"]}
venv_bin = str(Path(state["python"]).parent)

c.JupyterHub.bind_url = state["bind_url"]
c.JupyterHub.hub_bind_url = f"http://127.0.0.1:{state['hub_port']}"
c.ConfigurableHTTPProxy.api_url = f"http://127.0.0.1:{state['proxy_api_port']}"
c.ConfigurableHTTPProxy.command = [state["proxy"]]
if state["ssl_cert"]:
    c.JupyterHub.ssl_cert, c.JupyterHub.ssl_key = state["ssl_cert"], state["ssl_key"]
c.JupyterHub.db_url = f"sqlite:///{state['state_dir']}/jupyterhub.sqlite"
c.JupyterHub.cookie_secret_file = f"{state['state_dir']}/jupyterhub_cookie_secret"
c.JupyterHub.cleanup_servers = True  # the hub's stop stops every seat's server
c.JupyterHub.implicit_spawn_seconds = 1  # a link to a notebook starts the seat's server

# the login: each attendee types their seat's name and the workshop's password
c.JupyterHub.authenticator_class = "shared-password"
c.SharedPasswordAuthenticator.user_password = os.environ["CLASS_PASSWORD"]
c.Authenticator.allowed_users = set(seats)

# each seat's server runs as its own system user, in its own copy, on its own cores
c.JupyterHub.spawner_class = "localprocess"
c.Spawner.default_url = "/lab"
c.Spawner.start_timeout = 120  # fifty clicks at once on a small server: let them queue
c.Spawner.http_timeout = 120


def seat_server(spawner):
    """The seat's server: moved into its cgroup(s) where there are some, pinned to its cores,
    with the plan's environment and its own copy of the course first on PYTHONPATH."""
    seat = seats[spawner.user.name]
    moves = "".join(f"echo $$ > {procs}; " for procs in seat["cgroup_procs"])
    cpus = ",".join(map(str, seat["cpus"]))
    spawner.cmd = ["sh", "-c", f'{moves}exec taskset -c {cpus} "$0" "$@"',
                   f"{venv_bin}/jupyterhub-singleuser"]
    spawner.notebook_dir = f"{seat['home']}/notebooks"
    spawner.environment.update({
        **seat["env"], "PYTHONPATH": seat["home"], "HOME": seat["home"],
        "PATH": f"{venv_bin}:/usr/local/bin:/usr/bin:/bin",
        "JUPYTERLAB_SETTINGS_DIR": f"{seat['home']}/.jupyter/lab/user-settings",
    })


c.Spawner.pre_spawn_hook = seat_server

# an abandoned seat's server stops after the timeout (its files stay); the class check starts
# and uses the seats' servers with its own token
c.JupyterHub.services = [
    {"name": "idle-culler",
     "command": [state["python"], "-m", "jupyterhub_idle_culler",
                 f"--timeout={state['cull_timeout']}", "--cull-every=60"]},
    {"name": "class-check", "api_token": state["check_token"]},
]
c.JupyterHub.load_roles = [
    {"name": "idle-culler", "services": ["idle-culler"],
     "scopes": ["list:users", "read:users:activity", "read:servers", "delete:servers"]},
    {"name": "class-check", "services": ["class-check"],
     "scopes": ["list:users", "read:servers", "servers", "access:servers"]},
]
