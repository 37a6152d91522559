//! The kubelet's Prometheus endpoints against the fake runtime: a pod run by the pod manager
//! (as in a real kubelet) moves the kubelet's own metrics, its cgroups appear under
//! cAdvisor's names, the host under the node exporter's, and only users with `nodes/metrics`
//! may read any of them.

use super::*;

/// The value of the sample `series` (its name and labels as written) in `text`.
fn sample(text: &str, series: &str) -> Option<f64> {
    text.lines()
        .find_map(|l| l.strip_prefix(series)?.strip_prefix(' '))
        .and_then(|v| v.split_whitespace().next()?.parse().ok())
}

/// Usage files in the cgroup of container `id` of the pod with `uid`, and the pod's own.
fn write_cgroups(env: &Env, uid: &str, id: &str) {
    let config = &env.shared.config;
    let pod = minik8s_kubelet::cgroups::pod_cgroup_candidates(&config.cgroup_root, uid)
        .find(|cg| {
            config
                .cgroups_path
                .join("cpuacct")
                .join(cg.trim_start_matches('/'))
                .is_dir()
        })
        .expect("the pod's cgroup");
    for cgroup in [pod.clone(), format!("{pod}/{id}")] {
        for (controller, file, value) in [
            ("cpuacct", "cpuacct.usage", "2000000000\n"),
            ("memory", "memory.usage_in_bytes", "8192\n"),
            ("memory", "memory.stat", "total_inactive_file 1024\n"),
        ] {
            let dir = config
                .cgroups_path
                .join(controller)
                .join(cgroup.trim_start_matches('/'));
            std::fs::create_dir_all(&dir).unwrap();
            std::fs::write(dir.join(file), value).unwrap();
        }
    }
}

#[tokio::test]
async fn metrics_move_with_pods_and_need_nodes_metrics() {
    let env = start().await;
    // The pod manager, fed by this node's pods as a kubelet's is.
    let informers = minik8s_informers::Informers::new(env.client.clone());
    let sources = minik8s_kubelet::Sources::own(&informers, "n1");
    let (_wake, wakes) = tokio::sync::mpsc::unbounded_channel();
    tokio::spawn(minik8s_kubelet::pod::manager::run(
        env.shared.clone(),
        sources.pods,
        wakes,
    ));
    let pod: Pod = serde_json::from_value(json!({
        "metadata": {"name": "p"},
        "spec": {"nodeName": "n1", "containers": [{"name": "c", "image": "busybox:1.36"}]}
    }))
    .unwrap();
    let uid = env
        .pods()
        .create(&PostParams::default(), &pod)
        .await
        .unwrap()
        .metadata
        .uid
        .unwrap();
    let admin = env.apiserver_client();
    let scrape = |path: &'static str| {
        let (env, admin) = (&env, &admin);
        async move {
            let mut k = env.kubelet(Some(admin)).await.ok()?;
            let r = call(&mut k, Method::GET, path, &[]).await.ok()?;
            assert_eq!(r.status, StatusCode::OK, "{path}: {}", r.body);
            assert_eq!(
                r.headers[header::CONTENT_TYPE],
                "text/plain; version=0.0.4; charset=utf-8"
            );
            Some(r.body)
        }
    };
    // Seen, started and running: the pod's start latency, its syncs, the runtime's calls and
    // (after a relist) the running pod and container.
    let text = testkit::eventually(Duration::from_secs(30), "the pod to start", || async {
        let text = scrape("/metrics").await?;
        let started = sample(&text, "kubelet_pod_start_duration_seconds_count") == Some(1.0);
        let listed = sample(&text, "kubelet_running_pods") == Some(1.0);
        (started && listed).then_some(text)
    })
    .await;
    for (series, at_least) in [
        (
            "kubelet_running_containers{container_state=\"running\"}",
            1.0,
        ),
        (
            "kubelet_pod_worker_duration_seconds_count{operation_type=\"create\"}",
            1.0,
        ),
        (
            "kubelet_runtime_operations_total{operation_type=\"run_podsandbox\"}",
            1.0,
        ),
        (
            "kubelet_runtime_operations_total{operation_type=\"start_container\"}",
            1.0,
        ),
        (
            "kubelet_runtime_operations_duration_seconds_count{operation_type=\"create_container\"}",
            1.0,
        ),
        ("kubelet_started_pods_total", 1.0),
        ("kubelet_node_name{node=\"n1\"}", 1.0),
    ] {
        let v = sample(&text, series).unwrap_or_else(|| panic!("{series}\n{text}"));
        assert!(v >= at_least, "{series} {v}");
    }
    assert!(
        text.contains("kubelet_pod_start_duration_seconds_bucket{le=\"3600\"} 1\n"),
        "{text}"
    );
    // The process's own, as every component's `/metrics` has them.
    assert!(sample(&text, "process_start_time_seconds").is_some_and(|t| t > 1.7e9));

    // cAdvisor's view of the pod's cgroups.
    let running = env.fake.running(&uid);
    let id = running.iter().find(|(_, n)| n == "c").unwrap().0.clone();
    write_cgroups(&env, &uid, &id);
    let text = scrape("/metrics/cadvisor").await.unwrap();
    let cpu = text.lines().find(|l| {
        l.starts_with(
            "container_cpu_usage_seconds_total{container=\"c\",cpu=\"total\",id=\"/kubepods/",
        ) && l.contains(&format!(
            "/{id}\",image=\"busybox:1.36\",name=\"{id}\",namespace=\"default\",pod=\"p\"}} 2 "
        ))
    });
    assert!(cpu.is_some(), "{text}");
    assert!(
        text.lines().any(|l| l
            .starts_with("container_memory_working_set_bytes{container=\"\",id=\"/kubepods/")
            && l.contains("namespace=\"default\",pod=\"p\"} 7168 ")),
        "{text}"
    );
    assert!(text.contains("container_scrape_error 0\n"));
    assert!(text.contains("machine_cpu_cores{"));

    // The node exporter's view of the host.
    let text = scrape("/metrics/node").await.unwrap();
    for family in [
        "node_cpu_seconds_total{cpu=\"0\",mode=\"idle\"} ",
        "node_memory_MemAvailable_bytes ",
        "node_load1 ",
        "node_time_seconds ",
    ] {
        assert!(text.contains(family), "{family}");
    }

    // Who may read them: nobody anonymous, not a user without `nodes/metrics`.
    for path in [
        "/metrics",
        "/metrics/cadvisor",
        "/metrics/resource",
        "/metrics/node",
    ] {
        let mut k = env.kubelet(None).await.unwrap();
        let r = call(&mut k, Method::GET, path, &[]).await.unwrap();
        assert_eq!(r.status, StatusCode::UNAUTHORIZED, "{path}");
    }
    let token = reader_token(&env).await;
    let bearer = format!("Bearer {token}");
    let auth = [("authorization", bearer.as_str())];
    let mut k = env.kubelet(None).await.unwrap();
    let r = call(&mut k, Method::GET, "/metrics/node", &auth)
        .await
        .unwrap();
    assert_eq!(r.status, StatusCode::FORBIDDEN);
    assert_eq!(
        r.body,
        "Forbidden (user=system:serviceaccount:default:reader, verb=get, resource=nodes, subresource(s)=[metrics])\n"
    );
    // Granted `nodes/metrics` (what Prometheus's ClusterRole has): all four.
    let roles: Api<ClusterRole> = Api::all(env.client.clone());
    let role: ClusterRole = serde_json::from_value(json!({
        "metadata": {"name": "metrics-reader"},
        "rules": [{"apiGroups": [""], "resources": ["nodes/metrics"], "verbs": ["get"]}]
    }))
    .unwrap();
    roles.create(&PostParams::default(), &role).await.unwrap();
    let bindings: Api<ClusterRoleBinding> = Api::all(env.client.clone());
    let binding: ClusterRoleBinding = serde_json::from_value(json!({
        "metadata": {"name": "metrics-reader"},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "metrics-reader"},
        "subjects": [{"kind": "ServiceAccount", "name": "reader", "namespace": "default"}]
    }))
    .unwrap();
    bindings
        .create(&PostParams::default(), &binding)
        .await
        .unwrap();
    for path in [
        "/metrics",
        "/metrics/cadvisor",
        "/metrics/resource",
        "/metrics/node",
    ] {
        testkit::eventually(Duration::from_secs(20), "the binding to count", || {
            let env = &env;
            async move {
                let mut k = env.kubelet(None).await.ok()?;
                let r = call(&mut k, Method::GET, path, &auth).await.ok()?;
                (r.status == StatusCode::OK).then_some(())
            }
        })
        .await;
    }
    // `nodes/metrics` is not `nodes/stats` nor `nodes/proxy`.
    let mut k = env.kubelet(None).await.unwrap();
    let r = call(&mut k, Method::GET, "/stats/summary", &auth)
        .await
        .unwrap();
    assert_eq!(r.status, StatusCode::FORBIDDEN);
}
