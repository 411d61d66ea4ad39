//! The `translate` subcommand; `src/main.rs` only dispatches to it.

use super::{capsule, katalog, Options, TranslateError};
use std::path::PathBuf;
use std::process::ExitCode;

/// `kmutate translate`.
#[derive(Debug, clap::Args)]
pub struct TranslateArgs {
    #[command(subcommand)]
    pub format: TranslateFormat,
}

/// The declarative formats.
#[derive(Debug, clap::Subcommand)]
pub enum TranslateFormat {
    /// Orkestra Katalog `mutation:` rules (a Katalog, or a bare mutation block with --target).
    Katalog {
        /// The katalog file (`include:` paths resolve against its folder).
        file: PathBuf,
        /// The custom resource the block is declared on (required for a bare block;
        /// with a Katalog, selects the CRD entry of that group and kind).
        #[arg(long, value_name = "GROUP/VERSION/KIND/RESOURCE")]
        target: Option<String>,
        #[command(flatten)]
        common: CommonArgs,
    },
    /// Capsule Tenant `spec.rules[].mutate` entries.
    Capsule {
        /// A YAML file of one or more Tenants.
        file: PathBuf,
        #[command(flatten)]
        common: CommonArgs,
    },
}

/// Options of both formats.
#[derive(Debug, clap::Args)]
pub struct CommonArgs {
    /// admissionregistration.k8s.io version of the output: v1, v1beta1 or v1alpha1.
    #[arg(long, default_value = "v1")]
    pub api_version: String,
    /// Drop rules that cannot be translated, with a warning, instead of failing.
    #[arg(long)]
    pub skip_untranslatable: bool,
    /// reinvocationPolicy of the policies (Never keeps the source's single ordered pass).
    #[arg(long, default_value = "Never", value_parser = ["Never", "IfNeeded"])]
    pub reinvocation_policy: String,
}

impl CommonArgs {
    fn options(&self) -> Options {
        Options {
            api_version: self.api_version.clone(),
            skip_untranslatable: self.skip_untranslatable,
            reinvocation_policy: self.reinvocation_policy.clone(),
        }
    }
}

/// Runs `kmutate translate`: the YAML on stdout, warnings on stderr.
pub fn translate_cmd(args: TranslateArgs) -> anyhow::Result<ExitCode> {
    let result = match &args.format {
        TranslateFormat::Katalog {
            file,
            target,
            common,
        } => {
            let target = target.as_deref().map(katalog::Target::parse).transpose()?;
            katalog::translate_file(file, target.as_ref(), &common.options())
        }
        TranslateFormat::Capsule { file, common } => {
            capsule::translate_file(file, &common.options())
        }
    };
    match result {
        Ok(t) => {
            for w in &t.warnings {
                eprintln!("warning: {w}");
            }
            let yaml = t.to_yaml().map_err(anyhow::Error::msg)?;
            use std::io::Write as _;
            match std::io::stdout().lock().write_all(yaml.as_bytes()) {
                Ok(()) => Ok(ExitCode::SUCCESS),
                // A closed pipe (`| head`) is not an error of the translation.
                Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => Ok(ExitCode::SUCCESS),
                Err(e) => Err(e.into()),
            }
        }
        Err(e @ TranslateError::Untranslatable { .. }) => {
            eprintln!("error: {e} (--skip-untranslatable drops such rules)");
            Ok(ExitCode::FAILURE)
        }
        Err(e) => Err(e.into()),
    }
}
