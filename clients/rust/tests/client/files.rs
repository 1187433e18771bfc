//! A session's files: uploads its code reads, files its code writes read
//! back, listings, deletes, an exec's files and return_files, and the
//! typed errors for a bad path and a missing file.

use runbox_client::{Exec, FileEncoding, FileType, InputFile, Language, NewSession, ReturnFiles};

use crate::util::*;

fn base64(bytes: &[u8]) -> String {
    use base64::Engine;
    base64::engine::general_purpose::STANDARD.encode(bytes)
}

#[tokio::test]
async fn files_go_in_and_out_of_a_session() {
    let stack = Stack::start(&[]).await;
    let runbox = client(&stack.api);
    let session = runbox.create_session(&NewSession::new(Language::Python)).await.expect("create");
    let id = session.id.as_str();

    let written = runbox.upload_file(id, "data/in put.csv", "a,b\n1,2\n").await.expect("upload");
    assert_eq!((written.path.as_str(), written.size), ("data/in put.csv", 8));
    let binary: Vec<u8> = (0..768u32).map(|i| (i % 256) as u8).collect();
    assert_eq!(runbox.upload_file(id, "blob.bin", binary.clone()).await.expect("upload").size, 768);

    let code = "rows = open('data/in put.csv').read().splitlines()\n\
                print(len(rows), len(open('blob.bin', 'rb').read()))\n\
                open('data/out é.txt', 'w').write('from the session\\n')";
    let ran = runbox.exec(id, &Exec::new(code)).await.expect("exec");
    assert_eq!((ran.job.exit_code, ran.job.stdout.as_deref()), (Some(0), Some("2 768\n")), "{:?}", ran.job.stderr);
    assert_eq!(runbox.read_file(id, "data/out é.txt").await.expect("read"), b"from the session\n");
    assert_eq!(runbox.read_file(id, "blob.bin").await.expect("read"), binary);

    let home = runbox.list_files(id, None).await.expect("list");
    assert_eq!((home.path.as_str(), home.truncated), ("", false));
    let blob = home.files.iter().find(|f| f.name == "blob.bin").expect("blob listed");
    assert_eq!((blob.file_type, blob.size, blob.path.as_str()), (FileType::File, 768, "blob.bin"));
    assert!(home.files.iter().any(|f| f.name == "data" && f.file_type == FileType::Directory), "{home:?}");
    let data = runbox.list_files(id, Some("data")).await.expect("list");
    let mut paths: Vec<&str> = data.files.iter().map(|f| f.path.as_str()).collect();
    paths.sort();
    assert_eq!(paths, ["data/in put.csv", "data/out é.txt"]);

    runbox.delete_file(id, "data/in put.csv").await.expect("delete");
    let error = runbox.read_file(id, "data/in put.csv").await.expect_err("deleted");
    assert_eq!((error.status().map(|s| s.as_u16()), error.code()), (Some(404), Some("no_file")), "{error}");
    let listed = runbox.list_files(id, Some("data")).await.expect("list");
    assert_eq!(listed.files.iter().map(|f| f.name.as_str()).collect::<Vec<_>>(), ["out é.txt"]);

    // Errors: a path the client refuses before sending, the same as the server's answer.
    for bad in ["../etc/passwd", "/etc/passwd"] {
        let error = runbox.upload_file(id, bad, "x").await.expect_err(bad);
        assert_eq!((error.status().map(|s| s.as_u16()), error.code()), (Some(400), Some("invalid_path")), "{bad}");
    }
    let error = runbox.upload_file(id, "bad\\name", "x").await.expect_err("a backslash");
    assert_eq!(error.code(), Some("invalid_path"), "{error}");
    let error = runbox.read_file(id, "data").await.expect_err("a directory");
    assert_eq!((error.status().map(|s| s.as_u16()), error.code()), (Some(422), Some("not_a_file")), "{error}");

    runbox.destroy_session(id).await.expect("destroy");
    let error = runbox.list_files(id, None).await.expect_err("closed");
    assert_eq!(error.code(), Some("session_closed"), "{error}");
}

#[tokio::test]
async fn an_exec_takes_files_and_returns_what_it_wrote() {
    let stack = Stack::start(&[]).await;
    let runbox = client(&stack.api);
    let session = runbox.create_session(&NewSession::new(Language::Python)).await.expect("create");
    let exec = Exec::new(
        "n = len(open('in/b.bin', 'rb').read())\nopen('out.txt', 'w').write(open('in/a.txt').read().upper() + str(n))",
    )
    .file(InputFile { path: "in/a.txt".into(), content: "abc".into(), encoding: FileEncoding::Utf8 })
    .file(InputFile { path: "in/b.bin".into(), content: base64(&[0, 1, 2]), encoding: FileEncoding::Base64 })
    .return_files(ReturnFiles::All);
    let ran = runbox.exec(&session.id, &exec).await.expect("exec");
    assert_eq!(ran.job.exit_code, Some(0), "{:?}", ran.job.stderr);
    let out = ran.job.files.iter().find(|f| f.path == "out.txt").expect("out.txt returned");
    assert_eq!((out.content.as_str(), out.size, out.truncated), (base64(b"ABC3").as_str(), 4, false));

    let again = Exec::new("open('out.txt', 'a').write('!')").return_files(ReturnFiles::Paths(vec!["out.txt".into()]));
    let again = runbox.exec(&session.id, &again).await.expect("exec");
    let returned: Vec<(&str, &str)> = again.job.files.iter().map(|f| (f.path.as_str(), f.content.as_str())).collect();
    assert_eq!(returned, [("out.txt", base64(b"ABC3!").as_str())]);
    assert_eq!(runbox.read_file(&session.id, "in/a.txt").await.expect("read"), b"abc");
    runbox.destroy_session(&session.id).await.expect("destroy");
}
