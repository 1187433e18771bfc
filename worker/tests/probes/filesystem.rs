//! No job reads or writes the host's files. Python's `open` works on
//! Pyodide's in-memory filesystem, so those probes check that host files
//! stay unseen and unwritten rather than for a permission error.

use runbox_worker::sandbox::BootedChild;

use crate::util::*;

const SECRET: &str = "planted-secret-7f3a";

fn planted() -> (tempfile::TempDir, String) {
    let dir = outside_dir();
    let path = dir.path().join("secret.txt");
    std::fs::write(&path, SECRET).expect("plant");
    let path = path.display().to_string();
    (dir, path)
}

#[tokio::test]
async fn js_reads_etc_passwd() {
    let outcome = run(Js, "console.log(Deno.readTextFileSync('/etc/passwd'))").await;
    assert_fails_with(&outcome, "Requires read access to \"/etc/passwd\"");
}

#[tokio::test]
async fn js_reads_proc_self_environ() {
    let outcome = run(Js, "console.log(Deno.readTextFileSync('/proc/self/environ'))").await;
    assert_fails_with(&outcome, "Requires read access to \"/proc/self/environ\"");
}

#[tokio::test]
async fn js_reads_a_planted_file() {
    let (_dir, path) = planted();
    let outcome = run(Js, &format!("console.log(await Deno.readTextFile('{path}'))")).await;
    assert_fails_with(&outcome, &format!("Requires read access to \"{path}\""));
    assert!(!outcome.stdout.contains(SECRET));
}

#[tokio::test]
async fn ts_node_fs_reads() {
    for path in ["/etc/passwd", "/proc/self/environ"] {
        let code = format!(
            "import fs from 'node:fs';\nconst text: string = fs.readFileSync('{path}', 'utf8');\nconsole.log(text);"
        );
        assert_fails_with(&run(Ts, &code).await, &format!("Requires read access to \"{path}\""));
    }
}

#[tokio::test]
async fn js_lists_the_root() {
    let outcome = run(Js, "for (const e of Deno.readDirSync('/')) console.log(e.name)").await;
    assert_fails_with(&outcome, "Requires read access to \"/\"");
}

#[tokio::test]
async fn js_reads_a_sibling_jobs_directory() {
    let sandbox = sandbox().await;
    let sibling = BootedChild::boot(sandbox, Js).await.expect("sibling boots");
    let sibling_dir = sibling.dir().to_owned();
    let mode = std::os::unix::fs::PermissionsExt::mode(&std::fs::metadata(&sibling_dir).expect("stat").permissions());
    assert_eq!(mode & 0o777, 0o700, "job directories are private");
    let secret_file = sibling_dir.join("secret.txt");
    std::fs::write(&secret_file, SECRET).expect("plant in sibling");
    let code = format!(
        "try {{ console.log(Deno.readTextFileSync('{}')) }} catch (e) {{ console.error(String(e)) }}\n\
         for (const e of Deno.readDirSync('{}')) console.log(e.name)",
        secret_file.display(),
        sibling_dir.display()
    );
    let outcome = run(Js, &code).await;
    assert_fails_with(&outcome, "Requires read access");
    assert!(!outcome.stdout.contains(SECRET), "{outcome:#?}");
    assert!(outcome.stderr.contains("NotCapable: Requires read access"), "{outcome:#?}");
    drop(sibling);
}

#[tokio::test]
async fn python_open_sees_no_host_files() {
    let (_dir, path) = planted();
    for target in ["/etc/passwd", "/proc/self/environ", path.as_str()] {
        let outcome = run(Py, &format!("print(open('{target}').read())")).await;
        assert_fails_with(&outcome, "FileNotFoundError");
        assert!(!outcome.stdout.contains(SECRET));
    }
}

#[tokio::test]
async fn python_js_deno_read() {
    let (_dir, path) = planted();
    for target in ["/etc/passwd", path.as_str()] {
        let outcome = run(Py, &format!("import js\nprint(js.Deno.readTextFileSync('{target}'))")).await;
        assert_fails_with_any(&outcome, &[NO_DENO, &format!("NotCapable: Requires read access to \"{target}\"")]);
        assert!(!outcome.stdout.contains(SECRET));
    }
}

#[tokio::test]
async fn js_writes_anywhere() {
    let dir = outside_dir();
    let target = dir.path().join("written.txt");
    let t = target.display();
    for code in [
        format!("Deno.writeTextFileSync('{t}', 'x')"),
        format!("import fs from 'node:fs'; fs.writeFileSync('{t}', 'x')"),
        format!("Deno.mkdirSync('{t}.d')"),
        "Deno.writeTextFileSync('/tmp/runbox-probe-write', 'x')".to_owned(),
    ] {
        assert_fails_with(&run(Js, &code).await, "Requires write access");
    }
    assert!(!target.exists() && !dir.path().join("written.txt.d").exists());
    assert!(!std::path::Path::new("/tmp/runbox-probe-write").exists());
}

#[tokio::test]
async fn python_writes_stay_in_memory() {
    let dir = outside_dir();
    let target = dir.path().join("written.txt");
    let t = target.display();
    let outcome = run(
        Py,
        &format!(
            "import os\nos.makedirs('{}', exist_ok=True)\nopen('{t}', 'w').write('x')\nprint(open('{t}').read())",
            dir.path().display()
        ),
    )
    .await;
    assert_status(&outcome, runbox_common::Status::Completed);
    assert_eq!(outcome.stdout, "x\n", "{outcome:#?}");
    assert!(!target.exists(), "a Python write reached the host");

    let outcome = run(Py, &format!("import js\njs.Deno.writeTextFileSync('{t}', 'x')")).await;
    assert_fails_with_any(&outcome, &[NO_DENO, "NotCapable: Requires write access"]);
    assert!(!target.exists());
}

/// A planted file under a `node_modules` directory, and a `node_modules`
/// link to `/`. With node_modules resolution on, Deno skips its read check
/// for any path with that segment, following links.
fn planted_in_node_modules() -> (tempfile::TempDir, String, String) {
    let dir = outside_dir();
    let modules = dir.path().join("node_modules");
    std::fs::create_dir(&modules).expect("mkdir");
    std::fs::write(modules.join("secret.txt"), SECRET).expect("plant");
    std::os::unix::fs::symlink("/", modules.join("root")).expect("symlink");
    let secret = modules.join("secret.txt").display().to_string();
    let passwd = modules.join("root/etc/passwd").display().to_string();
    (dir, secret, passwd)
}

/// Every way a program might read `path`: a text import, `require`, and
/// Deno's and Node's file APIs. Prints what each got.
fn read_every_way(path: &str) -> String {
    format!(
        "const tries = {{\n\
           importText: () => import('file://{path}', {{ with: {{ type: 'text' }} }}).then((m) => m.default),\n\
           importJson: () => import('file://{path}', {{ with: {{ type: 'json' }} }}).then((m) => JSON.stringify(m.default)),\n\
           require: async () => (await import('node:module')).createRequire('file:///x.js')('{path}'),\n\
           globalRequire: async () => globalThis.require('{path}'),\n\
           deno: async () => Deno.readTextFileSync('{path}'),\n\
           nodeFs: async () => (await import('node:fs')).readFileSync('{path}', 'utf8'),\n\
         }};\n\
         const out = [];\n\
         for (const [name, read] of Object.entries(tries)) {{\n\
           try {{ out.push(name + ' read ' + String(await read()).slice(0, 40)); }}\n\
           catch (e) {{ out.push(name + ' denied'); }}\n\
         }}\n\
         return out.join('\\n');"
    )
}

#[tokio::test]
async fn js_reads_through_node_modules() {
    let (_dir, secret, passwd) = planted_in_node_modules();
    for path in [&secret, &passwd] {
        let code = format!("console.log(await (async () => {{ {} }})())", read_every_way(path));
        let outcome = run(Js, &code).await;
        assert_eq!(outcome.status, runbox_common::Status::Completed, "{outcome:#?}");
        assert!(!outcome.stdout.contains(" read "), "{path} was read: {outcome:#?}");
        assert!(!outcome.stdout.contains(SECRET) && !outcome.stdout.contains("root:"), "{outcome:#?}");
    }
}

#[tokio::test]
async fn python_reads_through_node_modules() {
    let (_dir, secret, passwd) = planted_in_node_modules();
    for path in [&secret, &passwd] {
        let js = format!("(async () => {{ {} }})()", read_every_way(path));
        let code = format!("from pyodide.code import run_js\nprint(await run_js({js:?}))");
        let outcome = run(Py, &code).await;
        assert_eq!(outcome.status, runbox_common::Status::Completed, "{outcome:#?}");
        assert_eq!(outcome.stdout.matches(" denied").count(), 6, "{path} was read: {outcome:#?}");
        assert!(!outcome.stdout.contains(SECRET) && !outcome.stdout.contains("root:"), "{outcome:#?}");
    }
}

fn with_files(language: runbox_common::Language, code: &str) -> runbox_common::JobSpec {
    use runbox_common::{FileEncoding, InputFile};
    let mut job = spec(language, code);
    job.files = vec![
        InputFile { path: "data.txt".into(), content: "h\u{e9}llo\n".into(), encoding: FileEncoding::Utf8 },
        InputFile { path: "nested/dir/bytes.bin".into(), content: "AP8B".into(), encoding: FileEncoding::Base64 },
    ];
    job
}

#[tokio::test]
async fn js_reads_its_files_and_nothing_beside_them() {
    let code = "console.log(Deno.readTextFileSync('data.txt').trim(), [...Deno.readFileSync('nested/dir/bytes.bin')].join(','));\n\
                for (const path of ['../deno/location_data', '/etc/passwd']) {\n\
                  try { Deno.readTextFileSync(path); console.log('read', path); } catch (e) { console.log(e.name); }\n\
                }\n\
                try { Deno.writeTextFileSync('data.txt', 'x'); } catch (e) { console.log(e.name); }";
    let outcome = run_spec(&with_files(Js, code)).await;
    assert_eq!(outcome.stdout, "h\u{e9}llo 0,255,1\nNotCapable\nNotCapable\nNotCapable\n", "{outcome:#?}");
    let outcome =
        run_spec(&with_files(Ts, "const t: string = Deno.readTextFileSync('data.txt'); console.log(t.length)")).await;
    assert_eq!(outcome.stdout, "6\n", "{outcome:#?}");
}

#[tokio::test]
async fn python_reads_its_files() {
    let code = "print(open('data.txt').read().strip(), list(open('nested/dir/bytes.bin', 'rb').read()))";
    let outcome = run_spec(&with_files(Py, code)).await;
    assert_eq!(outcome.stdout, "h\u{e9}llo [0, 255, 1]\n", "{outcome:#?}");
}

#[tokio::test]
async fn the_worker_refuses_file_paths_outside_the_working_directory() {
    // The api refuses these too; the worker checks again.
    for language in [Js, Py] {
        let mut job = with_files(language, "1");
        job.files[0].path = "../escape.txt".into();
        let outcome = run_spec(&job).await;
        assert_eq!(outcome.status, runbox_common::Status::InternalError, "{outcome:#?}");
        assert!(outcome.stderr.contains("not a valid file path"), "{outcome:#?}");
    }
}
