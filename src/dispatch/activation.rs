//! The variables one invocation's expressions see: `object`, `oldObject`,
//! `request`, `params`, `namespaceObject`, `authorizer` and the lazily
//! evaluated `variables`.

use crate::cel::{error_text, CelEnvironment, CompiledExpression};
use cel::common::traits::Indexer;
use cel::common::types::{self, CelString, Type};
use cel::common::value::{CowVal, Val};
use cel::context::VariableResolver;
use cel::ExecutionError;
use std::sync::OnceLock;

/// A policy variable, compiled (or the reason it did not compile).
#[derive(Debug, Clone)]
pub struct CompiledVariable {
    /// `variables[].name`.
    pub name: String,
    /// The compiled expression, or its compile error text.
    pub expression: Result<CompiledExpression, String>,
}

/// The inputs of one invocation, with the memo of its variables.
pub struct Activation<'a> {
    env: &'a CelEnvironment,
    inputs: Vec<(&'static str, Box<dyn Val + 'a>)>,
    variables: &'a [CompiledVariable],
    cells: Vec<OnceLock<Result<Box<dyn Val + 'static>, String>>>,
}

impl std::fmt::Debug for Activation<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Activation").finish_non_exhaustive()
    }
}

impl<'a> Activation<'a> {
    /// An activation over `inputs` (name, value) and the policy's variables.
    pub fn new(
        env: &'a CelEnvironment,
        inputs: Vec<(&'static str, Box<dyn Val + 'a>)>,
        variables: &'a [CompiledVariable],
    ) -> Self {
        Activation {
            env,
            inputs,
            variables,
            cells: (0..variables.len()).map(|_| OnceLock::new()).collect(),
        }
    }

    /// Evaluates `expr` and hands its result to `f` while the result still
    /// borrows the inputs; errors come back in upstream's words.
    pub fn evaluate<T>(
        &self,
        expr: &CompiledExpression,
        f: impl FnOnce(&dyn Val) -> T,
    ) -> Result<T, String> {
        let mut ctx = self.env.context();
        ctx.set_variable_resolver(self);
        match expr.evaluate(&ctx) {
            Ok(v) => Ok(f(&*v)),
            Err(e) => Err(error_text(&e)),
        }
    }

    fn variable(&self, index: usize) -> Result<&(dyn Val + 'static), ExecutionError> {
        let cell = self.cells[index].get_or_init(|| {
            let var = &self.variables[index];
            let result = match &var.expression {
                Err(e) => Err(e.clone()),
                Ok(expr) => self.evaluate(expr, to_static).and_then(|r| r),
            };
            result.map_err(|cause| {
                format!(
                    "composited variable \"{}\" fails to evaluate: {}",
                    var.name, cause
                )
            })
        });
        match cell {
            Ok(v) => Ok(v.as_ref()),
            Err(message) => Err(ExecutionError::function_error("variables", message)),
        }
    }
}

/// Copies a value out of the evaluation so that it outlives it.
fn to_static(v: &dyn Val) -> Result<Box<dyn Val + 'static>, String> {
    let value = cel::Value::try_from(v).map_err(|e| error_text(&e))?;
    Box::<dyn Val>::try_from(value).map_err(|e| error_text(&e))
}

impl VariableResolver for Activation<'_> {
    fn resolve<'b>(&'b self, variable: &str) -> Option<CowVal<'b, 'b>> {
        if variable == "variables" {
            return Some(CowVal::Owned(Box::new(VariablesView { activation: self })));
        }
        self.inputs
            .iter()
            .find(|(name, _)| *name == variable)
            .map(|(_, v)| CowVal::Borrowed(v.as_ref()))
    }
}

/// The `variables` object: each field evaluates its expression on first use.
struct VariablesView<'b> {
    activation: &'b Activation<'b>,
}

impl std::fmt::Debug for VariablesView<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("variables")
    }
}

static VARIABLES_TYPE: Type = types::MAP_TYPE;

impl Val for VariablesView<'_> {
    fn get_type(&self) -> &Type {
        &VARIABLES_TYPE
    }

    fn cel_type() -> &'static Type
    where
        Self: Sized,
    {
        &VARIABLES_TYPE
    }

    fn clone_as_boxed<'v>(&self) -> Box<dyn Val + 'v>
    where
        Self: 'v,
    {
        Box::new(VariablesView {
            activation: self.activation,
        })
    }

    fn as_indexer<'c, 'v>(&'c self) -> Option<&'c (dyn Indexer + 'v)>
    where
        Self: 'v,
    {
        Some(self)
    }
}

impl Indexer for VariablesView<'_> {
    fn get<'c, 'v>(&'c self, idx: &dyn Val) -> Result<CowVal<'c, 'v>, ExecutionError>
    where
        Self: 'v,
    {
        let name = idx
            .downcast_ref::<CelString>()
            .map(|s| s.inner())
            .ok_or_else(|| ExecutionError::no_such_key("variables"))?;
        let index = self
            .activation
            .variables
            .iter()
            .position(|v| v.name == name)
            .ok_or_else(|| ExecutionError::no_such_key(name))?;
        self.activation.variable(index).map(CowVal::Borrowed)
    }

    fn steal<'v>(self: Box<Self>, idx: &dyn Val) -> Result<Box<dyn Val + 'v>, ExecutionError>
    where
        Self: 'v,
    {
        self.get(idx).map(|v| v.into_owned())
    }
}
