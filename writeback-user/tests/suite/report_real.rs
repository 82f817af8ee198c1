//! Reports of real runs on the running kernel (root): a 10 s recording of
//! a real write, and a compare of four strategies that each last under a
//! second, both with data in every time panel. The writer's own byte
//! count (its report) checks what the timeline says it wrote.

use crate::support::{LoopFs, start_record, wbscope};

/// The time panels of a report page: (name, data points, empty reason).
fn time_panels(html: &str) -> Vec<(String, u64, Option<String>)> {
    html.split("<svg ")
        .skip(1)
        .map(|s| s.split_once('>').map_or(s, |(attrs, _)| attrs))
        .filter(|attrs| attrs.contains("class=\"panel time\""))
        .map(|attrs| {
            let attr = |name: &str| {
                attrs
                    .split_once(&format!("{name}=\""))
                    .and_then(|(_, rest)| rest.split_once('"'))
                    .map(|(v, _)| v.to_string())
            };
            (
                attr("data-panel").unwrap(),
                attr("data-points").unwrap().parse().unwrap(),
                attr("data-empty"),
            )
        })
        .collect()
}

fn assert_every_time_panel_has_data(html: &str) {
    let panels = time_panels(html);
    let names: Vec<&str> = panels.iter().map(|p| p.0.as_str()).collect();
    assert_eq!(
        names,
        [
            "findings", "writer", "kernel", "levels", "throttle", "fsync", "latency", "sizes"
        ]
    );
    for (name, points, empty) in &panels {
        if name == "findings" {
            // A healthy run may have no finding: then the strip says so.
            assert!(
                (*points > 0) != empty.is_some(),
                "{name}: {points} points, {empty:?}"
            );
            continue;
        }
        assert!(
            *points > 0 && empty.is_none(),
            "{name}: {points} points, {empty:?}"
        );
    }
}

#[test]
fn a_ten_second_recording_of_a_real_write_has_data_in_every_time_panel() {
    let _file = crate::support::file_group(module_path!());
    let fs = LoopFs::new("ext4", 512);
    let dir = tempfile::tempdir().unwrap();
    let rec = dir.path().join("wb.rec");
    let mut record = start_record(&[
        "--enable",
        "durability",
        "--duration",
        "10",
        "-o",
        rec.to_str().unwrap(),
    ]);
    // About 8 s of buffered writing at 40 MB/s, then fsync.
    let out = wbscope()
        .args(["write", "--dir"])
        .arg(&fs.mountpoint)
        .args([
            "--size",
            "320M",
            "--chunk",
            "1M",
            "--strategy",
            "fsync-end",
            "--rate",
            "40MB",
        ])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(record.wait().unwrap().success());
    let page = dir.path().join("wb.html");
    let out = wbscope()
        .arg("report")
        .arg(&rec)
        .arg("-o")
        .arg(&page)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let html = std::fs::read_to_string(&page).unwrap();
    assert_every_time_panel_has_data(&html);
    // Ten one-second bins (the recording's interval).
    let length = html
        .split_once("<th>length</th><td>")
        .and_then(|(_, rest)| rest.split_once(' '))
        .map(|(s, _)| s.parse::<f64>().unwrap())
        .unwrap();
    assert!((9.5..11.5).contains(&length), "length {length}");
    // Never overwritten.
    let again = wbscope()
        .arg("report")
        .arg(&rec)
        .arg("-o")
        .arg(&page)
        .output()
        .unwrap();
    assert_eq!(again.status.code(), Some(2));
}

#[test]
fn a_compare_of_four_runs_under_a_second_has_data_in_every_time_panel() {
    let _file = crate::support::file_group(module_path!());
    let fs = LoopFs::new("ext4", 512);
    let dir = tempfile::tempdir().unwrap();
    let page = dir.path().join("cmp.html");
    let svg = dir.path().join("cmp.svg");
    let out = wbscope()
        .args(["compare", "--dir"])
        .arg(&fs.mountpoint)
        .args([
            "--size",
            "48M",
            "--chunk",
            "4M",
            "--strategies",
            "buffered,fsync-end,srf-pipelined,direct",
            "--json",
            "--report",
        ])
        .arg(&page)
        .arg("--plot")
        .arg(&svg)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let doc: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    for run in doc["runs"].as_array().unwrap() {
        let name = run["strategy"].as_str().unwrap();
        let elapsed = run["writer"]["elapsed_s"].as_f64().unwrap();
        assert!(elapsed < 1.0, "{name}: {elapsed} s, not under a second");
        let t = &run["kernel"]["timeline"];
        assert_eq!(t["bin_s"].as_f64(), Some(0.1), "{name}: 100 ms bins");
        // The writer's report and the timeline's bytes agree.
        let metered: u64 = t["bins"]
            .as_array()
            .unwrap()
            .iter()
            .flat_map(|b| b["writer_bytes"].as_array().cloned().unwrap_or_default())
            .map(|v| v.as_u64().unwrap())
            .sum();
        assert_eq!(metered, run["writer"]["bytes"].as_u64().unwrap(), "{name}");
    }
    let html = std::fs::read_to_string(&page).unwrap();
    assert_every_time_panel_has_data(&html);
    // `report` of the saved document draws the same page's panels.
    let json = dir.path().join("cmp.json");
    std::fs::write(&json, &out.stdout).unwrap();
    let again = dir.path().join("again.html");
    let out = wbscope()
        .arg("report")
        .arg(&json)
        .arg("-o")
        .arg(&again)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_every_time_panel_has_data(&std::fs::read_to_string(&again).unwrap());
    let figure = std::fs::read_to_string(&svg).unwrap();
    // The findings strip, seven time panels and three distributions.
    assert!(figure.starts_with("<svg") && figure.matches("class=\"panel").count() == 11);
}
