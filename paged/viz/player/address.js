// Query parameters kept in the address bar in place (history.replaceState), for paged/viz/app/address.py.
// A write through st.query_params is a history entry of its own; this one is not.
export default function keepParams(component) {
  const params = component.data?.params;
  if (!params) return;
  const u = new URL(window.location.href);
  for (const [k, v] of Object.entries(params)) {
    if (v === null) u.searchParams.delete(k);
    else u.searchParams.set(k, String(v));
  }
  if (u.href !== window.location.href)
    window.history.replaceState(window.history.state, "", u.href);
}
