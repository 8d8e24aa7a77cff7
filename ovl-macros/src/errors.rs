//! Collecting every compile error of an item, rather than stopping at the first.

/// The errors found so far, combined into one [`syn::Error`] (which reports each at its span).
#[derive(Debug, Default)]
pub(crate) struct Errors(Option<syn::Error>);

impl Errors {
    pub(crate) fn push(&mut self, error: syn::Error) {
        match &mut self.0 {
            Some(all) => all.combine(error),
            None => self.0 = Some(error),
        }
    }

    /// Keeps the error of `result`, if any.
    pub(crate) fn check<T>(&mut self, result: Result<T, syn::Error>) -> Option<T> {
        match result {
            Ok(value) => Some(value),
            Err(e) => {
                self.push(e);
                None
            }
        }
    }

    pub(crate) fn finish(self) -> Result<(), syn::Error> {
        match self.0 {
            Some(e) => Err(e),
            None => Ok(()),
        }
    }

    /// The errors, when at least one was pushed.
    pub(crate) fn into_error(self) -> syn::Error {
        self.0.expect("an error was pushed")
    }
}
